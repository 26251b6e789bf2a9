// The mock provider's answers, in OpenAI's exact wire format (chat.completion,
// chat.completion.chunk, text_completion, embeddings list). Pure functions, so they
// are unit-tested against the format without any I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "request/request_context.h"

namespace tahua::mock {

struct MockRequest {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string model;  // as sent upstream
  bool stream = false;
  bool include_usage = false;
  int completion_tokens = 16;
  int prompt_tokens = 1;
  int embedding_inputs = 1;
  int embedding_dimensions = 8;
  bool embedding_base64 = false;  // "encoding_format": "base64" (the openai SDK's default)
  std::int64_t created = 0;
};

// The deterministic text of token i ("Hello", " from", ...).
std::string_view tokenText(int i);

// Estimate used for the mock's prompt_tokens: about four bytes of JSON per token.
int estimatePromptTokens(std::string_view body);
// Number of inputs in an embeddings request body ("input": string | [..]); 1 if unclear.
int countEmbeddingInputs(std::string_view body);
// True when an embeddings request asks for "encoding_format": "base64".
bool wantsBase64(std::string_view body);

std::string fullResponse(const MockRequest& r);  // non-streaming body
// Streaming: event i of eventCount(r), each a complete "data: ...\n\n" frame; the last
// one is "data: [DONE]\n\n".
int eventCount(const MockRequest& r);
std::string streamEvent(const MockRequest& r, int i);

}  // namespace tahua::mock
