// The client's side of a translation: the API the client speaks (OpenAI chat,
// Anthropic Messages, OpenAI Responses). Its codec brings the client's request into the
// canonical chat form and encodes canonical results and stream chunks back into the
// client's wire format, errors included.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "translate/chat.h"

namespace tahua {

// Shared by the codecs.
namespace codec {
// A request the codec cannot translate: a 400 invalid_request_error.
inline Error invalid(std::string message) { return Error{ErrorKind::InvalidRequest, std::move(message)}; }
// The same, naming the request field in the error's `param`.
inline Error invalidAt(std::string param, std::string message) {
  Error e{ErrorKind::InvalidRequest, std::move(message)};
  e.param = std::move(param);
  return e;
}
// Answers' `created` stamps.
inline std::int64_t nowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace codec

// What the client asked for, as far as encoding the answer is concerned.
struct InboundOptions {
  std::string model;          // the model name the client used (answers carry it back)
  bool include_usage = false;  // OpenAI chat: stream_options.include_usage
  // The gateway's estimate of the prompt's tokens (-1: none). Anthropic streams report
  // input tokens in message_start, before an OpenAI-format upstream reports any.
  std::int64_t estimated_input_tokens = -1;
  // Request parameters an answer object repeats (Responses: tools, tool_choice, store,
  // temperature, ...), as InboundCodec::requestEcho picked them.
  boost::json::object echo{};
};

// Encodes one answer stream for the client. Every method appends to `out`.
class ChatStreamEncoder {
 public:
  virtual ~ChatStreamEncoder() = default;
  virtual void onChunk(const ChatChunk& chunk, std::string& out) = 0;
  // The upstream ended normally: close the stream the way the API does ([DONE],
  // message_stop, response.completed).
  virtual void finish(std::string& out) = 0;
  // The stream ends with an error event instead.
  virtual void fail(const Error& error, std::string& out) = 0;
};

class InboundCodec {
 public:
  virtual ~InboundCodec() = default;
  // The client's request body -> canonical OpenAI chat request.
  virtual std::variant<boost::json::object, Error> toChat(std::string_view body) const = 0;
  virtual std::string encodeResult(const ChatResult& result, const InboundOptions& options) const = 0;
  virtual std::unique_ptr<ChatStreamEncoder> streamEncoder(const InboundOptions& options) const = 0;
  // The prompt's tokens estimated from the client's request body, for APIs whose streams
  // announce them before the upstream does; -1 for the others (no work spent).
  virtual std::int64_t estimatePromptTokens(std::string_view /*body*/) const { return -1; }
  // The request parameters the API's answer objects repeat (InboundOptions::echo); empty
  // for APIs whose answers repeat none (no work spent).
  virtual boost::json::object requestEcho(std::string_view /*body*/) const { return {}; }
  // A vendor's error answer, re-shaped for this API (the status stays the vendor's).
  virtual std::string encodeUpstreamError(const UpstreamErrorInfo& error) const = 0;
};

const InboundCodec& openAIChatInbound();
const InboundCodec& anthropicInbound();
const InboundCodec& responsesInbound();

// Vendor codecs living next to their inbound counterparts.
std::unique_ptr<VendorCodec> makeOpenAIChatCodec();
std::unique_ptr<VendorCodec> makeAnthropicCodec();

// Anthropic's usage object -> canonical (input includes cache reads and writes).
Usage anthropicUsageFrom(const boost::json::object& usage);

// Shared by codecs: OpenAI finish_reason <-> error type names by HTTP status.
std::string_view openAIErrorType(int status);
std::string_view anthropicErrorType(int status);

}  // namespace tahua
