#include "translate/bedrock_codec.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "aws/event_stream.h"
#include "aws/sigv4.h"
#include "core/json_read.h"

namespace tahua {
namespace {

namespace json = boost::json;

constexpr std::size_t kMaxVendorMessageBytes = 1024;  // vendor text quoted in our errors
constexpr std::size_t kMaxStreamToolCalls = 4096;     // bounds the block-index map
constexpr std::int64_t kMaxContentBlockIndex = 1 << 20;

Error invalid(const std::string& param, std::string_view why) {
  return Error{ErrorKind::InvalidRequest, "Invalid parameter '" + param + "': " + std::string(why)};
}

Error unsupported(const std::string& param, std::string_view why) {
  return Error{ErrorKind::InvalidRequest,
               "Unsupported parameter '" + param + "' for this Bedrock model: " + std::string(why)};
}

Error badBedrockResponse(std::string_view why) {
  return Error{ErrorKind::UpstreamBadResponse, "The upstream sent an invalid Bedrock response: " + std::string(why)};
}

// Length of the well-formed UTF-8 sequence starting at s[i], 0 if there is none.
std::size_t utf8SequenceLength(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char b = at(0);
  if (b < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b >= 0xC2 && b <= 0xDF) n = 2;
  else if (b == 0xE0) n = 3, lo = 0xA0;
  else if (b == 0xED) n = 3, hi = 0x9F;  // no UTF-16 surrogates
  else if (b >= 0xE1 && b <= 0xEF) n = 3;
  else if (b == 0xF0) n = 4, lo = 0x90;
  else if (b == 0xF4) n = 4, hi = 0x8F;  // nothing past U+10FFFF
  else if (b >= 0xF1 && b <= 0xF3) n = 4;
  else return 0;
  if (s.size() - i < n || at(1) < lo || at(1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (at(k) < 0x80 || at(k) > 0xBF) return 0;
  return n;
}

// Vendor text quoted in our error messages, which reach the client inside JSON, so it
// must be UTF-8: at most kMaxVendorMessageBytes, cut between characters (not inside
// one), and bytes that are not UTF-8 (header values are raw bytes) replaced by U+FFFD.
std::string clip(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8SequenceLength(s, i);
    const std::string_view piece = n ? s.substr(i, n) : std::string_view("\xEF\xBF\xBD");
    if (out.size() + piece.size() > kMaxVendorMessageBytes) return out + "...";
    out += piece;
    i += n ? n : 1;
  }
  return out;
}

std::string str(const json::string& s) { return std::string(s.data(), s.size()); }

bool isNumber(const json::value& v) { return v.is_int64() || v.is_uint64() || v.is_double(); }

double toDouble(const json::value& v) {
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  return v.get_double();
}

// A non-negative integer (an integral double such as 512.0 included), or -1.
std::int64_t nonNegativeInt(const json::value* v) {
  if (!v) return -1;
  if (v->is_int64()) return v->get_int64() >= 0 ? v->get_int64() : -1;
  if (v->is_uint64())
    return v->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX) ? static_cast<std::int64_t>(v->get_uint64()) : -1;
  if (v->is_double()) {
    const double d = v->get_double();
    if (d >= 0 && d < 9.0e18 && std::floor(d) == d) return static_cast<std::int64_t>(d);
  }
  return -1;
}

bool isNullOrAbsent(const json::value* v) { return v == nullptr || v->is_null(); }

// ---------------------------------------------------------------- request

struct DataUrlImage {
  std::string format;  // png, jpeg, gif, webp
  std::string base64;
};

bool validBase64(std::string_view s) {
  if (s.empty()) return false;
  std::size_t pad = 0;
  for (char c : s) {
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad > 0) return false;  // data after padding
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/'))
      return false;
  }
  return pad <= 2;
}

std::variant<DataUrlImage, Error> parseImageUrl(std::string_view url, const std::string& param) {
  auto lower_prefix = [&](std::string_view prefix) {
    if (url.size() < prefix.size()) return false;
    for (std::size_t i = 0; i < prefix.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(url[i])) != prefix[i]) return false;
    return true;
  };
  if (lower_prefix("http://") || lower_prefix("https://"))
    return unsupported(param, "Bedrock needs the image bytes; send the image as a data: URL (base64)");
  if (!lower_prefix("data:")) return invalid(param, "expected a data: URL with a base64 image");
  const std::size_t comma = url.find(',');
  if (comma == std::string_view::npos) return invalid(param, "malformed data: URL");
  std::string meta(url.substr(5, comma - 5));
  for (char& c : meta) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (meta.size() < 7 || meta.compare(meta.size() - 7, 7, ";base64") != 0)
    return invalid(param, "the data: URL must be base64-encoded");
  const std::string media = meta.substr(0, meta.find(';'));
  DataUrlImage img;
  if (media == "image/png") img.format = "png";
  else if (media == "image/jpeg" || media == "image/jpg") img.format = "jpeg";
  else if (media == "image/gif") img.format = "gif";
  else if (media == "image/webp") img.format = "webp";
  else return unsupported(param, "image type '" + clip(media) + "' (Bedrock takes png, jpeg, gif or webp)");
  img.base64.assign(url.substr(comma + 1));
  if (!validBase64(img.base64)) return invalid(param, "the image data is not valid base64");
  return img;
}

json::object textBlock(std::string_view text) { return json::object{{"text", text}}; }

// OpenAI message content (string, null or array of parts) -> Converse content blocks.
// Empty text is dropped: Converse rejects blank text blocks.
std::optional<Error> appendContent(const json::value& content, const std::string& param, bool allow_images,
                                   json::array& out) {
  if (content.is_null()) return std::nullopt;
  if (const auto* s = content.if_string()) {
    if (!s->empty()) out.push_back(textBlock(*s));
    return std::nullopt;
  }
  const auto* parts = content.if_array();
  if (!parts) return invalid(param, "must be a string or an array of content parts");
  for (std::size_t j = 0; j < parts->size(); ++j) {
    const std::string part_param = param + "[" + std::to_string(j) + "]";
    const auto* part = (*parts)[j].if_object();
    if (!part) return invalid(part_param, "must be an object");
    const auto* type = part->if_contains("type");
    if (!type || !type->is_string()) return invalid(part_param + ".type", "must be a string");
    const std::string_view t = type->get_string();
    if (t == "text" || t == "refusal") {
      const auto* text = part->if_contains(t);
      if (!text || !text->is_string()) return invalid(part_param + "." + std::string(t), "must be a string");
      if (!text->get_string().empty()) out.push_back(textBlock(text->get_string()));
    } else if (t == "image_url") {
      const std::string url_param = part_param + ".image_url.url";
      if (!allow_images) return unsupported(part_param + ".type", "images are only accepted in user messages");
      const auto* iu = part->if_contains("image_url");
      const json::value* url = nullptr;
      if (iu && iu->is_object()) url = iu->get_object().if_contains("url");
      else if (iu && iu->is_string()) url = iu;
      if (!url || !url->is_string()) return invalid(url_param, "must be a string");
      auto img = parseImageUrl(url->get_string(), url_param);
      if (auto* e = std::get_if<Error>(&img)) return std::move(*e);
      auto& d = std::get<DataUrlImage>(img);
      out.push_back(json::object{
          {"image", json::object{{"format", d.format}, {"source", json::object{{"bytes", std::move(d.base64)}}}}}});
    } else {
      return unsupported(part_param + ".type", "content part type '" + clip(t) + "'");
    }
  }
  return std::nullopt;
}

// Appends blocks to the conversation, merging into the previous message of the same role
// (Converse requires user/assistant alternation; OpenAI allows repeats).
void appendMessage(json::array& messages, std::string_view role, json::array blocks) {
  if (blocks.empty()) return;
  if (!messages.empty()) {
    auto& last = messages.back().as_object();
    if (last.at("role").as_string() == role) {
      auto& content = last.at("content").as_array();
      for (auto& b : blocks) content.push_back(std::move(b));
      return;
    }
  }
  messages.push_back(json::object{{"role", role}, {"content", std::move(blocks)}});
}

std::optional<Error> checkUnsupported(const json::object& chat) {
  if (const auto* n = chat.if_contains("n"); !isNullOrAbsent(n) && nonNegativeInt(n) != 1)
    return unsupported("n", "only one choice (n=1) is supported");
  if (const auto* v = chat.if_contains("logprobs"); v && v->is_bool() && v->get_bool())
    return unsupported("logprobs", "log probabilities are not available");
  if (const auto* v = chat.if_contains("top_logprobs"); !isNullOrAbsent(v))
    return unsupported("top_logprobs", "log probabilities are not available");
  if (const auto* v = chat.if_contains("response_format"); !isNullOrAbsent(v)) {
    const auto* o = v->if_object();
    const auto* type = o ? o->if_contains("type") : nullptr;
    if (!type || !type->is_string()) return invalid("response_format.type", "must be a string");
    if (type->get_string() != "text")
      return unsupported("response_format", "structured output ('" + clip(type->get_string()) + "') is not available");
  }
  for (const char* p : {"presence_penalty", "frequency_penalty"}) {
    if (const auto* v = chat.if_contains(p); !isNullOrAbsent(v)) {
      if (!isNumber(*v)) return invalid(p, "must be a number");
      if (toDouble(*v) != 0.0) return unsupported(p, "penalties are not available");
    }
  }
  if (const auto* v = chat.if_contains("logit_bias"); !isNullOrAbsent(v) && !(v->is_object() && v->get_object().empty()))
    return unsupported("logit_bias", "logit bias is not available");
  for (const char* p : {"functions", "function_call", "audio", "prediction", "web_search_options", "reasoning_effort"})
    if (!isNullOrAbsent(chat.if_contains(p))) return unsupported(p, "not available through the Converse API");
  if (const auto* v = chat.if_contains("modalities"); !isNullOrAbsent(v)) {
    const auto* a = v->if_array();
    if (!a) return invalid("modalities", "must be an array");
    for (const auto& m : *a)
      if (!m.is_string() || m.get_string() != "text") return unsupported("modalities", "only text output is available");
  }
  return std::nullopt;
}

std::variant<json::object, Error> toolUseBlock(const json::value& call, const std::string& param) {
  const auto* c = call.if_object();
  if (!c) return invalid(param, "must be an object");
  if (const auto* t = c->if_contains("type"); t && !(t->is_string() && t->get_string() == "function"))
    return unsupported(param + ".type", "only function tool calls are supported");
  const auto* id = c->if_contains("id");
  if (!id || !id->is_string() || id->get_string().empty()) return invalid(param + ".id", "must be a non-empty string");
  const auto* fn = c->if_contains("function");
  if (!fn || !fn->is_object()) return invalid(param + ".function", "must be an object");
  const auto* name = fn->get_object().if_contains("name");
  if (!name || !name->is_string() || name->get_string().empty())
    return invalid(param + ".function.name", "must be a non-empty string");
  json::value input = json::object{};
  if (const auto* args = fn->get_object().if_contains("arguments"); !isNullOrAbsent(args)) {
    if (!args->is_string()) return invalid(param + ".function.arguments", "must be a JSON text");
    if (!args->get_string().empty()) {
      boost::system::error_code ec;
      input = readJson(args->get_string(), ec);
      if (ec || !input.is_object()) return invalid(param + ".function.arguments", "must be a JSON object text");
    }
  }
  return json::object{{"toolUse", json::object{{"toolUseId", id->get_string()},
                                               {"name", name->get_string()},
                                               {"input", std::move(input)}}}};
}

std::variant<json::array, Error> toolSpecs(const json::value& tools) {
  const auto* arr = tools.if_array();
  if (!arr) return invalid("tools", "must be an array");
  json::array out;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const std::string param = "tools[" + std::to_string(i) + "]";
    const auto* t = (*arr)[i].if_object();
    if (!t) return invalid(param, "must be an object");
    const auto* type = t->if_contains("type");
    if (!type || !type->is_string() || type->get_string() != "function")
      return unsupported(param + ".type", "only function tools are supported");
    const auto* fn = t->if_contains("function");
    if (!fn || !fn->is_object()) return invalid(param + ".function", "must be an object");
    const auto& f = fn->get_object();
    const auto* name = f.if_contains("name");
    if (!name || !name->is_string() || name->get_string().empty())
      return invalid(param + ".function.name", "must be a non-empty string");
    json::object spec{{"name", name->get_string()}};
    if (const auto* d = f.if_contains("description"); !isNullOrAbsent(d)) {
      if (!d->is_string()) return invalid(param + ".function.description", "must be a string");
      if (!d->get_string().empty()) spec["description"] = d->get_string();
    }
    json::value schema = json::object{{"type", "object"}, {"properties", json::object{}}};
    if (const auto* p = f.if_contains("parameters"); !isNullOrAbsent(p)) {
      if (!p->is_object()) return invalid(param + ".function.parameters", "must be a JSON Schema object");
      schema = *p;
    }
    spec["inputSchema"] = json::object{{"json", std::move(schema)}};
    out.push_back(json::object{{"toolSpec", std::move(spec)}});
  }
  return out;
}

// Converse's inferenceConfig from max_tokens / temperature / top_p / stop.
std::variant<json::object, Error> inferenceConfig(const json::object& chat, std::int64_t default_max_tokens) {
  json::object cfg;
  std::int64_t max_tokens = default_max_tokens;
  for (const char* p : {"max_tokens", "max_completion_tokens"}) {  // the newer name wins
    if (const auto* v = chat.if_contains(p); !isNullOrAbsent(v)) {
      const std::int64_t n = nonNegativeInt(v);
      if (n < 1 || n > INT32_MAX) return invalid(p, "must be a positive integer");
      max_tokens = n;
    }
  }
  cfg["maxTokens"] = max_tokens;
  if (const auto* v = chat.if_contains("temperature"); !isNullOrAbsent(v)) {
    if (!isNumber(*v) || toDouble(*v) < 0) return invalid("temperature", "must be a non-negative number");
    cfg["temperature"] = *v;
  }
  if (const auto* v = chat.if_contains("top_p"); !isNullOrAbsent(v)) {
    if (!isNumber(*v) || toDouble(*v) < 0 || toDouble(*v) > 1) return invalid("top_p", "must be a number in [0, 1]");
    cfg["topP"] = *v;
  }
  if (const auto* v = chat.if_contains("stop"); !isNullOrAbsent(v)) {
    json::array stops;
    if (v->is_string()) {
      stops.push_back(*v);
    } else if (const auto* a = v->if_array()) {
      for (const auto& s : *a) {
        if (!s.is_string()) return invalid("stop", "must be a string or an array of strings");
        stops.push_back(s);
      }
    } else {
      return invalid("stop", "must be a string or an array of strings");
    }
    if (!stops.empty()) cfg["stopSequences"] = std::move(stops);
  }
  return cfg;
}

std::variant<EncodedRequest, Error> encodeConverse(const json::object& chat, const EncodeOptions& options) {
  if (options.upstream_model.empty()) return Error{ErrorKind::Internal, "No Bedrock model id is configured."};
  if (auto e = checkUnsupported(chat)) return std::move(*e);

  const auto* msgs_v = chat.if_contains("messages");
  if (!msgs_v || !msgs_v->is_array()) return invalid("messages", "must be an array");
  const auto& msgs = msgs_v->get_array();

  json::array system;
  json::array messages;
  bool has_tool_blocks = false;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    const auto* m = msgs[i].if_object();
    if (!m) return invalid(param, "must be an object");
    const auto* role_v = m->if_contains("role");
    if (!role_v || !role_v->is_string()) return invalid(param + ".role", "must be a string");
    const std::string_view role = role_v->get_string();
    static const json::value kNull;
    const json::value* content = m->if_contains("content");
    if (!content) content = &kNull;

    if (role == "system" || role == "developer") {
      // Converse has one top-level system prompt: instructions given mid-conversation
      // join it, in order.
      if (auto e = appendContent(*content, param + ".content", false, system)) return std::move(*e);
    } else if (role == "user") {
      json::array blocks;
      if (auto e = appendContent(*content, param + ".content", true, blocks)) return std::move(*e);
      appendMessage(messages, "user", std::move(blocks));
    } else if (role == "assistant") {
      json::array blocks;
      if (auto e = appendContent(*content, param + ".content", false, blocks)) return std::move(*e);
      if (const auto* calls = m->if_contains("tool_calls"); !isNullOrAbsent(calls)) {
        if (!calls->is_array()) return invalid(param + ".tool_calls", "must be an array");
        const auto& arr = calls->get_array();
        for (std::size_t j = 0; j < arr.size(); ++j) {
          auto block = toolUseBlock(arr[j], param + ".tool_calls[" + std::to_string(j) + "]");
          if (auto* e = std::get_if<Error>(&block)) return std::move(*e);
          blocks.push_back(std::move(std::get<json::object>(block)));
          has_tool_blocks = true;
        }
      }
      appendMessage(messages, "assistant", std::move(blocks));
    } else if (role == "tool") {
      const auto* id = m->if_contains("tool_call_id");
      if (!id || !id->is_string() || id->get_string().empty())
        return invalid(param + ".tool_call_id", "must be a non-empty string");
      json::array result_content;
      if (auto e = appendContent(*content, param + ".content", false, result_content)) return std::move(*e);
      // A tool result goes back as a user turn; consecutive ones merge into one message.
      json::array blocks;
      blocks.push_back(json::object{
          {"toolResult", json::object{{"toolUseId", id->get_string()}, {"content", std::move(result_content)}}}});
      appendMessage(messages, "user", std::move(blocks));
      has_tool_blocks = true;
    } else {
      return unsupported(param + ".role", "role '" + clip(role) + "'");
    }
  }
  if (messages.empty()) return invalid("messages", "must contain at least one user or assistant message");

  json::object body;
  body["messages"] = std::move(messages);
  if (!system.empty()) body["system"] = std::move(system);
  auto cfg = inferenceConfig(chat, options.default_max_tokens);
  if (auto* e = std::get_if<Error>(&cfg)) return std::move(*e);
  body["inferenceConfig"] = std::move(std::get<json::object>(cfg));

  // Tools. Converse has no "none" tool choice. With tool_choice "none" the tools are left
  // out, so the model cannot call one; except when the history holds toolUse/toolResult
  // blocks, which Bedrock rejects without a toolConfig: then the tools are kept with no
  // toolChoice (the model may still call a tool; the client sees an ordinary tool call).
  json::array tools;
  if (const auto* t = chat.if_contains("tools"); !isNullOrAbsent(t)) {
    auto specs = toolSpecs(*t);
    if (auto* e = std::get_if<Error>(&specs)) return std::move(*e);
    tools = std::move(std::get<json::array>(specs));
  }
  json::object tool_choice;
  bool choice_none = false;
  if (const auto* tc = chat.if_contains("tool_choice"); !isNullOrAbsent(tc)) {
    if (tc->is_string()) {
      const std::string_view c = tc->get_string();
      if (c == "auto") tool_choice = json::object{{"auto", json::object{}}};
      else if (c == "required") tool_choice = json::object{{"any", json::object{}}};
      else if (c == "none") choice_none = true;
      else return invalid("tool_choice", "must be 'none', 'auto', 'required' or a function choice");
    } else if (const auto* o = tc->if_object()) {
      const auto* fn = o->if_contains("function");
      const auto* name = fn && fn->is_object() ? fn->get_object().if_contains("name") : nullptr;
      if (!name || !name->is_string() || name->get_string().empty())
        return invalid("tool_choice.function.name", "must be a non-empty string");
      tool_choice = json::object{{"tool", json::object{{"name", name->get_string()}}}};
    } else {
      return invalid("tool_choice", "must be a string or an object");
    }
    if (tools.empty() && !tool_choice.empty() && !tool_choice.contains("auto"))
      return invalid("tool_choice", "requires 'tools'");
  }
  if (!tools.empty() && (!choice_none || has_tool_blocks)) {
    json::object tool_config{{"tools", std::move(tools)}};
    if (!tool_choice.empty()) tool_config["toolChoice"] = std::move(tool_choice);
    body["toolConfig"] = std::move(tool_config);
  }

  EncodedRequest req;
  req.path = "/model/" + awsUriEncode(options.upstream_model, true) + (options.stream ? "/converse-stream" : "/converse");
  req.body = json::serialize(body);
  req.content_type = "application/json";
  req.accept = options.stream ? "application/vnd.amazon.eventstream" : "application/json";
  return req;
}

// ---------------------------------------------------------------- response

std::string finishReason(std::string_view stop_reason) {
  if (stop_reason == "max_tokens" || stop_reason == "model_context_window_exceeded") return "length";
  if (stop_reason == "tool_use") return "tool_calls";
  if (stop_reason == "content_filtered" || stop_reason == "guardrail_intervened") return "content_filter";
  return "stop";  // end_turn, stop_sequence, and anything newer
}

// Converse counts cache reads and writes apart from inputTokens; ours includes them.
Usage usageFrom(const json::object& u) {
  Usage usage;
  const std::int64_t in = nonNegativeInt(u.if_contains("inputTokens"));
  const std::int64_t read = nonNegativeInt(u.if_contains("cacheReadInputTokens"));
  const std::int64_t write = nonNegativeInt(u.if_contains("cacheWriteInputTokens"));
  if (in >= 0) usage.prompt_tokens = in + std::max<std::int64_t>(read, 0) + std::max<std::int64_t>(write, 0);
  usage.completion_tokens = nonNegativeInt(u.if_contains("outputTokens"));
  usage.cached_tokens = read;
  return usage;
}

std::variant<ChatResult, Error> decodeConverse(std::string_view body) {
  auto parsed = parseJsonObject(body, "a Converse response");
  if (auto* e = std::get_if<Error>(&parsed)) return std::move(*e);
  const auto& obj = std::get<json::object>(parsed);
  const auto* output = obj.if_contains("output");
  const auto* message = output && output->is_object() ? output->get_object().if_contains("message") : nullptr;
  if (!message || !message->is_object()) return badBedrockResponse("no output.message");
  const auto* content = message->get_object().if_contains("content");
  if (!content || !content->is_array()) return badBedrockResponse("output.message.content is not an array");

  ChatResult r;
  for (const auto& block_v : content->get_array()) {
    const auto* block = block_v.if_object();
    if (!block) return badBedrockResponse("a content block is not an object");
    if (const auto* text = block->if_contains("text")) {
      if (!text->is_string()) return badBedrockResponse("a text block is not a string");
      r.content += text->get_string();
    } else if (const auto* tu = block->if_contains("toolUse")) {
      const auto* t = tu->if_object();
      const auto* id = t ? t->if_contains("toolUseId") : nullptr;
      const auto* name = t ? t->if_contains("name") : nullptr;
      if (!id || !id->is_string() || !name || !name->is_string()) return badBedrockResponse("a toolUse block lacks toolUseId/name");
      ToolCall call;
      call.id = str(id->get_string());
      call.name = str(name->get_string());
      const auto* input = t->if_contains("input");
      call.arguments = isNullOrAbsent(input) ? "{}" : json::serialize(*input);
      r.tool_calls.push_back(std::move(call));
    }
    // reasoningContent, citations, ...: nothing the OpenAI shape carries.
  }
  if (const auto* sr = obj.if_contains("stopReason"); sr && sr->is_string()) r.finish_reason = finishReason(sr->get_string());
  if (const auto* u = obj.if_contains("usage"); u && u->is_object()) r.usage = usageFrom(u->get_object());
  return r;
}

// ---------------------------------------------------------------- stream

class BedrockStreamDecoder final : public ChatStreamDecoder {
 public:
  std::optional<Error> feed(std::string_view bytes, ChunkSink& sink) override {
    if (error_) return error_;
    auto err = frames_.feed(bytes, [&](const EventStreamMessage& m) { return onMessage(m, sink); });
    if (err) error_ = err;
    return err;
  }

  std::optional<Error> finish(ChunkSink& sink) override {
    if (error_) return error_;
    if (frames_.midMessage())
      error_ = Error{ErrorKind::UpstreamTruncated, "The Bedrock stream ended in the middle of an event."};
    else if (!saw_stop_ || !saw_metadata_)
      // metadata (usage) is ConverseStream's last event: without it the stream was cut.
      error_ = Error{ErrorKind::UpstreamTruncated,
                     saw_stop_ ? "The Bedrock stream ended before its metadata event."
                               : "The Bedrock stream ended before the message was complete."};
    return error_;
  }

 private:
  void emit(ChatChunk& chunk, ChunkSink& sink) {
    if (!started_) {  // a stream that skipped messageStart still begins the turn once
      chunk.start = true;
      started_ = true;
    }
    sink.onChunk(chunk);
  }

  static std::string vendorMessage(const EventStreamMessage& m) {
    boost::system::error_code ec;
    const json::value v = readJson(m.payload, ec);
    if (!ec && v.is_object()) {
      for (const char* k : {"message", "Message"})
        if (const auto* s = v.get_object().if_contains(k); s && s->is_string()) return clip(s->get_string());
    }
    return "no message";
  }

  std::optional<Error> onMessage(const EventStreamMessage& m, ChunkSink& sink) {
    const std::string* message_type = m.stringHeader(":message-type");
    if (message_type && *message_type == "exception") {
      const std::string* type = m.stringHeader(":exception-type");
      return Error{ErrorKind::UpstreamInterrupted,
                   "Bedrock stream error (" + clip(type ? *type : "exception") + "): " + vendorMessage(m)};
    }
    if (message_type && *message_type == "error") {
      const std::string* code = m.stringHeader(":error-code");
      const std::string* text = m.stringHeader(":error-message");
      return Error{ErrorKind::UpstreamInterrupted,
                   "Bedrock stream error (" + clip(code ? *code : "error") + "): " + clip(text ? *text : "no message")};
    }
    if (message_type && *message_type != "event") return std::nullopt;  // future message types
    const std::string* event = m.stringHeader(":event-type");
    if (!event) return badBedrockResponse("an event without :event-type");

    const std::string_view et = *event;
    if (et != "messageStart" && et != "contentBlockStart" && et != "contentBlockDelta" && et != "contentBlockStop" &&
        et != "messageStop" && et != "metadata")
      return std::nullopt;
    auto parsed = parseJsonObject(m.payload, "a ConverseStream event");
    if (auto* e = std::get_if<Error>(&parsed)) return std::move(*e);
    const auto& p = std::get<json::object>(parsed);

    ChatChunk chunk;
    if (et == "messageStart") {
      if (started_) return std::nullopt;
      emit(chunk, sink);
    } else if (et == "contentBlockStart") {
      const auto* start = p.if_contains("start");
      const auto* tu = start && start->is_object() ? start->get_object().if_contains("toolUse") : nullptr;
      if (!tu) return std::nullopt;  // a text/reasoning block: its deltas say it all
      const std::int64_t block = nonNegativeInt(p.if_contains("contentBlockIndex"));
      if (block < 0 || block > kMaxContentBlockIndex) return badBedrockResponse("contentBlockStart without a valid index");
      const auto* t = tu->if_object();
      const auto* id = t ? t->if_contains("toolUseId") : nullptr;
      const auto* name = t ? t->if_contains("name") : nullptr;
      if (!id || !id->is_string() || !name || !name->is_string())
        return badBedrockResponse("a toolUse start lacks toolUseId/name");
      if (tool_index_.size() >= kMaxStreamToolCalls) return badBedrockResponse("too many tool calls");
      if (tool_index_.count(block)) return badBedrockResponse("content block " + std::to_string(block) + " started twice");
      const int index = static_cast<int>(tool_index_.size());
      tool_index_.emplace(block, index);
      ToolCallDelta d;
      d.index = index;
      d.id = str(id->get_string());
      d.name = str(name->get_string());
      chunk.tool_calls.push_back(std::move(d));
      emit(chunk, sink);
    } else if (et == "contentBlockDelta") {
      const auto* delta = p.if_contains("delta");
      if (!delta || !delta->is_object()) return badBedrockResponse("contentBlockDelta without delta");
      const auto& d = delta->get_object();
      if (const auto* text = d.if_contains("text")) {
        if (!text->is_string()) return badBedrockResponse("a text delta is not a string");
        if (text->get_string().empty()) return std::nullopt;
        chunk.content = str(text->get_string());
        emit(chunk, sink);
      } else if (const auto* tu = d.if_contains("toolUse")) {
        const std::int64_t block = nonNegativeInt(p.if_contains("contentBlockIndex"));
        const auto it = tool_index_.find(block);
        if (it == tool_index_.end()) return badBedrockResponse("a toolUse delta for a block that did not start");
        const auto* input = tu->is_object() ? tu->get_object().if_contains("input") : nullptr;
        if (!input || !input->is_string()) return badBedrockResponse("a toolUse delta without input text");
        if (input->get_string().empty()) return std::nullopt;
        ToolCallDelta td;
        td.index = it->second;
        td.arguments = str(input->get_string());
        chunk.tool_calls.push_back(std::move(td));
        emit(chunk, sink);
      }
      // reasoningContent / citation deltas: not carried by the OpenAI shape.
    } else if (et == "contentBlockStop") {
      return std::nullopt;
    } else if (et == "messageStop") {
      const auto* sr = p.if_contains("stopReason");
      chunk.finish_reason = finishReason(sr && sr->is_string() ? std::string_view(sr->get_string()) : "end_turn");
      saw_stop_ = true;
      emit(chunk, sink);
    } else if (et == "metadata") {
      saw_metadata_ = true;
      const auto* u = p.if_contains("usage");
      if (!u || !u->is_object()) return std::nullopt;
      chunk.usage = usageFrom(u->get_object());
      emit(chunk, sink);
    }
    return std::nullopt;
  }

  EventStreamDecoder frames_;
  std::optional<Error> error_;
  std::unordered_map<std::int64_t, int> tool_index_;  // contentBlockIndex -> tool call index
  bool started_ = false;
  bool saw_stop_ = false;
  bool saw_metadata_ = false;
};

// ---------------------------------------------------------------- errors

std::string typeFromStatus(int status) {
  switch (status) {
    case 400: return "ValidationException";
    case 403: return "AccessDeniedException";
    case 404: return "ResourceNotFoundException";
    case 408: return "ModelTimeoutException";
    case 424: return "ModelErrorException";
    case 429: return "ThrottlingException";
    case 500: return "InternalServerException";
    case 503: return "ServiceUnavailableException";
    default: return status >= 500 ? "InternalServerException" : "";
  }
}

// "com.amazon.coral.validate#ValidationException" / "ValidationException:http://..." -> name.
std::string cleanType(std::string_view t) {
  if (const auto hash = t.rfind('#'); hash != std::string_view::npos) t = t.substr(hash + 1);
  if (const auto colon = t.find(':'); colon != std::string_view::npos) t = t.substr(0, colon);
  return clip(t);
}

class BedrockCodec final : public VendorCodec {
 public:
  std::variant<EncodedRequest, Error> encodeRequest(const json::object& chat, const EncodeOptions& options) const override {
    return encodeConverse(chat, options);
  }

  std::variant<ChatResult, Error> decodeResponse(std::string_view body) const override { return decodeConverse(body); }

  std::unique_ptr<ChatStreamDecoder> streamDecoder() const override { return std::make_unique<BedrockStreamDecoder>(); }

  UpstreamErrorInfo decodeError(int status, std::string_view body) const override {
    UpstreamErrorInfo info;
    info.status = status;
    boost::system::error_code ec;
    const json::value v = readJson(body, ec);
    if (!ec && v.is_object()) {
      const auto& o = v.get_object();
      for (const char* k : {"message", "Message"})
        if (const auto* s = o.if_contains(k); s && s->is_string()) {
          info.message = clip(s->get_string());
          break;
        }
      for (const char* k : {"__type", "code", "Code", "type"})
        if (const auto* s = o.if_contains(k); s && s->is_string() && !s->get_string().empty()) {
          info.type = cleanType(s->get_string());
          break;
        }
    }
    if (info.type.empty()) info.type = typeFromStatus(status);
    if (info.message.empty()) info.message = "Bedrock returned HTTP " + std::to_string(status) + ".";
    return info;
  }
};

}  // namespace

std::unique_ptr<VendorCodec> makeBedrockCodec() { return std::make_unique<BedrockCodec>(); }

}  // namespace tahua
