#include "providers/mock/mock_responses.h"

#include <simdjson.h>

#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <openssl/evp.h>

#include <cmath>
#include <cstring>

namespace tahua::mock {
namespace {

constexpr std::string_view kWords[] = {"Hello", " from",  " the",   " tahua", " mock", " model", ".",     " This",
                                       " is",   " a",     " fixed", ",",      " deterministic", " answer", " for", " tests"};

std::string jsonQuoted(std::string_view s) {
  return boost::json::serialize(boost::json::string_view(s.data(), s.size()));
}

std::string usageJson(const MockRequest& r) {
  int completion = r.endpoint == Endpoint::Embeddings ? 0 : r.completion_tokens;
  std::string out = "{\"prompt_tokens\":" + std::to_string(r.prompt_tokens);
  if (r.endpoint != Endpoint::Embeddings) out += ",\"completion_tokens\":" + std::to_string(completion);
  out += ",\"total_tokens\":" + std::to_string(r.prompt_tokens + completion) + "}";
  return out;
}

std::string fullText(const MockRequest& r) {
  std::string text;
  for (int i = 0; i < r.completion_tokens; ++i) text += tokenText(i);
  return text;
}

std::string chunkPrefix(const MockRequest& r) {
  return "{\"id\":\"chatcmpl-tahua-mock\",\"object\":\"chat.completion.chunk\",\"created\":" + std::to_string(r.created) +
         ",\"model\":" + jsonQuoted(r.model) + ",\"system_fingerprint\":null,\"choices\":[";
}

std::string usageNull(const MockRequest& r) { return r.include_usage ? ",\"usage\":null" : ""; }

// Deterministic, bounded, distinct per (input, dimension).
float embeddingValue(int input, int d) { return static_cast<float>(std::sin(static_cast<double>(input * 131 + d * 7 + 1)) * 0.5); }

std::string embedding(int input, int dims, bool base64) {
  if (base64) {
    // OpenAI's base64 format: the little-endian float32 array, base64-encoded.
    std::string raw(static_cast<std::size_t>(dims) * 4, '\0');
    for (int d = 0; d < dims; ++d) {
      float v = embeddingValue(input, d);
      std::uint32_t bits;
      std::memcpy(&bits, &v, 4);
      for (int b = 0; b < 4; ++b) raw[static_cast<std::size_t>(d * 4 + b)] = static_cast<char>((bits >> (8 * b)) & 0xff);
    }
    std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
    int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(raw.data()),
                            static_cast<int>(raw.size()));
    out.resize(static_cast<std::size_t>(n));
    return jsonQuoted(out);
  }
  std::string out = "[";
  for (int d = 0; d < dims; ++d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6f", static_cast<double>(embeddingValue(input, d)));
    if (d) out.push_back(',');
    out += buf;
  }
  out += "]";
  return out;
}

}  // namespace

std::string_view tokenText(int i) { return kWords[static_cast<std::size_t>(i) % std::size(kWords)]; }

int estimatePromptTokens(std::string_view body) {
  return static_cast<int>(std::max<std::size_t>(1, body.size() / 4));
}

int countEmbeddingInputs(std::string_view body) {
  using namespace simdjson;
  ondemand::parser parser;
  padded_string padded(body);
  ondemand::document doc;
  if (parser.iterate(padded).get(doc)) return 1;
  ondemand::value input;
  if (doc["input"].get(input)) return 1;
  ondemand::json_type type;
  if (input.type().get(type) || type != ondemand::json_type::array) return 1;
  int count = 0;
  bool all_numbers = true;
  for (auto element : input.get_array()) {
    ondemand::json_type et;
    if (element.type().get(et)) return 1;
    if (et != ondemand::json_type::number) all_numbers = false;
    ++count;
  }
  // An array of token ids is one input; an array of strings / token arrays is many.
  return (count == 0 || all_numbers) ? 1 : count;
}

bool wantsBase64(std::string_view body) {
  using namespace simdjson;
  ondemand::parser parser;
  padded_string padded(body);
  ondemand::document doc;
  if (parser.iterate(padded).get(doc)) return false;
  std::string_view format;
  if (doc["encoding_format"].get_string().get(format)) return false;
  return format == "base64";
}

std::string fullResponse(const MockRequest& r) {
  const std::string created = std::to_string(r.created);
  switch (r.endpoint) {
    case Endpoint::Embeddings: {
      std::string out = "{\"object\":\"list\",\"data\":[";
      for (int i = 0; i < r.embedding_inputs; ++i) {
        if (i) out.push_back(',');
        out += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) +
               ",\"embedding\":" + embedding(i, r.embedding_dimensions, r.embedding_base64) + "}";
      }
      out += "],\"model\":" + jsonQuoted(r.model) + ",\"usage\":" + usageJson(r) + "}";
      return out;
    }
    case Endpoint::Completions:
      return "{\"id\":\"cmpl-tahua-mock\",\"object\":\"text_completion\",\"created\":" + created +
             ",\"model\":" + jsonQuoted(r.model) + ",\"choices\":[{\"text\":" + jsonQuoted(fullText(r)) +
             ",\"index\":0,\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":" + usageJson(r) + "}";
    default:
      return "{\"id\":\"chatcmpl-tahua-mock\",\"object\":\"chat.completion\",\"created\":" + created +
             ",\"model\":" + jsonQuoted(r.model) +
             ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":" + jsonQuoted(fullText(r)) +
             ",\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":" + usageJson(r) +
             ",\"system_fingerprint\":null}";
  }
}

// Chat: role chunk, one chunk per token, finish chunk, [usage chunk], [DONE].
// Completions: one chunk per token, finish chunk, [usage chunk], [DONE].
int eventCount(const MockRequest& r) {
  int n = r.completion_tokens + 2 + (r.include_usage ? 1 : 0);
  if (r.endpoint == Endpoint::ChatCompletions) ++n;
  return n;
}

std::string streamEvent(const MockRequest& r, int i) {
  const int total = eventCount(r);
  if (i >= total - 1) return "data: [DONE]\n\n";
  if (r.include_usage && i == total - 2) {
    if (r.endpoint == Endpoint::Completions)
      return "data: {\"id\":\"cmpl-tahua-mock\",\"object\":\"text_completion\",\"created\":" + std::to_string(r.created) +
             ",\"model\":" + jsonQuoted(r.model) + ",\"choices\":[],\"usage\":" + usageJson(r) + "}\n\n";
    return "data: " + chunkPrefix(r) + "],\"usage\":" + usageJson(r) + "}\n\n";
  }
  const int finish_index = total - 2 - (r.include_usage ? 1 : 0);
  if (r.endpoint == Endpoint::Completions) {
    std::string text = i == finish_index ? "" : std::string(tokenText(i));
    std::string finish = i == finish_index ? "\"stop\"" : "null";
    return "data: {\"id\":\"cmpl-tahua-mock\",\"object\":\"text_completion\",\"created\":" + std::to_string(r.created) +
           ",\"choices\":[{\"text\":" + jsonQuoted(text) + ",\"index\":0,\"logprobs\":null,\"finish_reason\":" + finish +
           "}],\"model\":" + jsonQuoted(r.model) + usageNull(r) + "}\n\n";
  }
  std::string delta;
  std::string finish = "null";
  if (i == 0) delta = "{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}";
  else if (i == finish_index) { delta = "{}"; finish = "\"stop\""; }
  else delta = "{\"content\":" + jsonQuoted(tokenText(i - 1)) + "}";
  return "data: " + chunkPrefix(r) + "{\"index\":0,\"delta\":" + delta + ",\"logprobs\":null,\"finish_reason\":" + finish +
         "}]" + usageNull(r) + "}\n\n";
}

}  // namespace tahua::mock
