// Anthropic Messages on both sides of a translation: as the vendor format (OpenAI-SDK
// clients reaching Claude) and as the client's API (Anthropic-SDK clients reaching any
// other model). Field mapping, decided once and documented in docs/providers.md:
//   system/developer messages <-> `system`; tool messages <-> `tool_result` blocks in a
//   user turn; assistant tool_calls <-> `tool_use` blocks; image_url <-> image source
//   (base64 or url); stop <-> stop_sequences; tool_choice auto/required/none/{function}
//   <-> auto/any/none/tool; finish_reason stop/length/tool_calls/content_filter <->
//   stop_reason end_turn(+stop_sequence)/max_tokens/tool_use/refusal.
// Anthropic requires max_tokens: the provider's `default_max_tokens` fills it in.
// OpenAI's temperature runs 0..2, Anthropic's 0..1: values above 1 are clamped to 1.
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <map>

#include "sse/sse_parser.h"
#include "core/json_read.h"
#include "tokens/token_estimator.h"
#include "translate/inbound.h"
#include "translate/json_util.h"

namespace tahua {
namespace bj = boost::json;

std::string_view anthropicErrorType(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

namespace {

using codec::invalid;

std::string_view stopToFinish(std::string_view stop) {
  if (stop == "max_tokens") return "length";
  if (stop == "tool_use") return "tool_calls";
  if (stop == "refusal") return "content_filter";
  return "stop";  // end_turn, stop_sequence, pause_turn
}

std::string_view finishToStop(std::string_view finish) {
  if (finish == "length") return "max_tokens";
  if (finish == "tool_calls") return "tool_use";
  if (finish == "content_filter") return "refusal";
  return "end_turn";
}

Usage readAnthropicUsage(const bj::object& u) {
  Usage usage;
  auto in = json::integer(u, "input_tokens");
  auto read = json::integer(u, "cache_read_input_tokens");
  auto created = json::integer(u, "cache_creation_input_tokens");
  if (in) usage.prompt_tokens = *in + read.value_or(0) + created.value_or(0);  // canonical input includes cached
  if (read) usage.cached_tokens = *read;
  usage.completion_tokens = json::integer(u, "output_tokens").value_or(-1);
  return usage;
}

// "data:image/png;base64,AAAA" -> (media type, data); nullopt if not a base64 data URL.
std::optional<std::pair<std::string, std::string>> splitDataUrl(std::string_view url) {
  if (url.substr(0, 5) != "data:") return std::nullopt;
  auto comma = url.find(',');
  if (comma == std::string_view::npos) return std::nullopt;
  std::string_view meta = url.substr(5, comma - 5);
  constexpr std::string_view kB64 = ";base64";
  if (meta.size() < kB64.size() || meta.substr(meta.size() - kB64.size()) != kB64) return std::nullopt;
  return std::make_pair(std::string(meta.substr(0, meta.size() - kB64.size())), std::string(url.substr(comma + 1)));
}

// ---- OpenAI chat -> Anthropic request (vendor side) ---------------------------------

std::variant<bj::array, Error> userBlocks(const bj::value& content, std::string_view where) {
  bj::array blocks;
  if (content.is_string()) {
    blocks.push_back(bj::object{{"type", "text"}, {"text", content.get_string()}});
    return blocks;
  }
  if (!content.is_array()) return invalid(std::string(where) + ".content must be a string or an array.");
  std::size_t i = 0;
  for (const auto& pv : content.get_array()) {
    const std::string at = std::string(where) + ".content[" + std::to_string(i++) + "]";
    if (!pv.is_object()) return invalid(at + " must be an object.");
    const bj::object& part = pv.get_object();
    std::string_view type = json::strOr(part, "type");
    if (type == "text") {
      blocks.push_back(bj::object{{"type", "text"}, {"text", json::strOr(part, "text")}});
    } else if (type == "image_url") {
      std::string_view url;
      if (const auto* iu = json::obj(part, "image_url")) url = json::strOr(*iu, "url");
      else url = json::strOr(part, "image_url");
      if (url.empty()) return invalid(at + ".image_url.url is required.");
      bj::object source;
      if (auto data = splitDataUrl(url)) {
        source = {{"type", "base64"}, {"media_type", data->first}, {"data", data->second}};
      } else {
        source = {{"type", "url"}, {"url", url}};
      }
      blocks.push_back(bj::object{{"type", "image"}, {"source", std::move(source)}});
    } else {
      return invalid(at + ".type '" + std::string(type) + "' is not supported by the anthropic provider.");
    }
  }
  return blocks;
}

void appendTurn(bj::array& messages, std::string_view role, bj::array blocks) {
  // Anthropic wants alternating turns: consecutive same-role messages become one.
  if (!messages.empty()) {
    bj::object& last = messages.back().as_object();
    if (json::strOr(last, "role") == role) {
      bj::array& existing = last["content"].as_array();
      for (auto& b : blocks) existing.push_back(std::move(b));
      return;
    }
  }
  messages.push_back(bj::object{{"role", role}, {"content", std::move(blocks)}});
}

std::variant<bj::object, Error> chatToAnthropic(const bj::object& chat, const EncodeOptions& options) {
  for (std::string_view unsupported : {"logprobs", "top_logprobs"})
    if (const auto* v = chat.if_contains(unsupported); v && !v->is_null() && !(v->is_bool() && !v->get_bool()))
      return invalid("Parameter '" + std::string(unsupported) + "' is not supported by the anthropic provider.");
  if (auto n = json::integer(chat, "n"); n && *n != 1)
    return invalid("Parameter 'n' must be 1 for the anthropic provider.");
  if (const auto* rf = json::obj(chat, "response_format"); rf && json::strOr(*rf, "type") != "text")
    return invalid("Parameter 'response_format' is not supported by the anthropic provider.");

  bj::object out;
  out["model"] = options.upstream_model;
  std::string system;
  bj::array messages;
  const auto* msgs = json::arr(chat, "messages");
  if (!msgs || msgs->empty()) return invalid("'messages' must be a non-empty array.");
  for (std::size_t i = 0; i < msgs->size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!(*msgs)[i].is_object()) return invalid(where + " must be an object.");
    const bj::object& m = (*msgs)[i].get_object();
    std::string_view role = json::strOr(m, "role");
    const bj::value* content = m.if_contains("content");
    if (role == "system" || role == "developer") {
      if (content) {
        if (!system.empty()) system += "\n\n";
        if (content->is_string()) system += content->get_string();
        else if (content->is_array())
          for (const auto& p : content->get_array())
            if (p.is_object()) {
              if (!system.empty() && system.back() != '\n') system += '\n';
              system += json::strOr(p.get_object(), "text");
            }
      }
    } else if (role == "user") {
      if (!content) return invalid(where + ".content is required.");
      auto blocks = userBlocks(*content, where);
      if (auto* e = std::get_if<Error>(&blocks)) return std::move(*e);
      appendTurn(messages, "user", std::move(std::get<bj::array>(blocks)));
    } else if (role == "assistant") {
      bj::array blocks;
      if (content && !content->is_null()) {
        std::string text;
        if (content->is_string()) text = content->get_string();
        else if (content->is_array())
          for (const auto& p : content->get_array())
            if (p.is_object()) {
              if (!text.empty()) text += '\n';
              text += json::strOr(p.get_object(), "text");
            }
        if (!text.empty()) blocks.push_back(bj::object{{"type", "text"}, {"text", text}});
      }
      if (const auto* calls = json::arr(m, "tool_calls")) {
        for (std::size_t j = 0; j < calls->size(); ++j) {
          const std::string cw = where + ".tool_calls[" + std::to_string(j) + "]";
          if (!(*calls)[j].is_object()) return invalid(cw + " must be an object.");
          const bj::object& call = (*calls)[j].get_object();
          const bj::object* fn = json::obj(call, "function");
          if (!fn) return invalid(cw + ".function is required.");
          std::string_view args = json::strOr(*fn, "arguments", "{}");
          boost::system::error_code ec;
          bj::value input = readJson(args.empty() ? std::string_view("{}") : args, ec);
          if (ec || !input.is_object()) return invalid(cw + ".function.arguments must be a JSON object text.");
          blocks.push_back(bj::object{{"type", "tool_use"},
                                      {"id", json::strOr(call, "id")},
                                      {"name", json::strOr(*fn, "name")},
                                      {"input", std::move(input)}});
        }
      }
      if (blocks.empty()) continue;  // an empty assistant turn carries nothing
      appendTurn(messages, "assistant", std::move(blocks));
    } else if (role == "tool") {
      std::string text;
      if (content && content->is_string()) text = content->get_string();
      else if (content && content->is_array())
        for (const auto& p : content->get_array())
          if (p.is_object()) {
            if (!text.empty()) text += '\n';
            text += json::strOr(p.get_object(), "text");
          }
      bj::array blocks{bj::object{{"type", "tool_result"}, {"tool_use_id", json::strOr(m, "tool_call_id")}, {"content", text}}};
      appendTurn(messages, "user", std::move(blocks));
    } else {
      return invalid(where + ".role '" + std::string(role) + "' is not supported.");
    }
  }
  if (!system.empty()) out["system"] = system;
  out["messages"] = std::move(messages);
  std::int64_t max_tokens = json::integer(chat, "max_completion_tokens")
                                .value_or(json::integer(chat, "max_tokens").value_or(options.default_max_tokens));
  out["max_tokens"] = max_tokens;
  if (const auto* t = chat.if_contains("temperature"); t && t->is_number())
    out["temperature"] = std::min(t->to_number<double>(), 1.0);
  if (const auto* p = chat.if_contains("top_p"); p && p->is_number()) out["top_p"] = p->to_number<double>();
  if (const auto* stop = chat.if_contains("stop")) {
    if (stop->is_string()) out["stop_sequences"] = bj::array{stop->get_string()};
    else if (stop->is_array()) out["stop_sequences"] = stop->get_array();
  }
  if (options.stream) out["stream"] = true;
  if (const auto* tools = json::arr(chat, "tools"); tools && !tools->empty()) {
    bj::array atools;
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const bj::object* t = (*tools)[i].if_object();
      const bj::object* fn = t ? json::obj(*t, "function") : nullptr;
      if (!fn || json::strOr(*t, "type", "function") != "function")
        return invalid("tools[" + std::to_string(i) + "] must be a function tool.");
      bj::object at{{"name", json::strOr(*fn, "name")}};
      if (auto d = json::str(*fn, "description")) at["description"] = *d;
      if (const auto* params = json::obj(*fn, "parameters")) at["input_schema"] = *params;
      else at["input_schema"] = bj::object{{"type", "object"}, {"properties", bj::object{}}};
      atools.push_back(std::move(at));
    }
    out["tools"] = std::move(atools);
  }
  if (const auto* tc = chat.if_contains("tool_choice")) {
    bj::object choice;
    if (tc->is_string()) {
      std::string_view s = tc->get_string();
      if (s == "required") choice["type"] = "any";
      else if (s == "none") choice["type"] = "none";
      else choice["type"] = "auto";
    } else if (tc->is_object()) {
      const bj::object* fn = json::obj(tc->get_object(), "function");
      choice = {{"type", "tool"}, {"name", fn ? json::strOr(*fn, "name") : std::string_view{}}};
    }
    if (const auto* ptc = chat.if_contains("parallel_tool_calls"); ptc && ptc->is_bool() && !ptc->get_bool() && !choice.empty())
      choice["disable_parallel_tool_use"] = true;
    if (!choice.empty() && out.contains("tools")) out["tool_choice"] = std::move(choice);
  }
  if (auto user = json::str(chat, "user")) out["metadata"] = bj::object{{"user_id", *user}};
  return out;
}

class AnthropicStreamDecoder final : public ChatStreamDecoder, private SseSink {
 public:
  std::optional<Error> feed(std::string_view bytes, ChunkSink& sink) override {
    sink_ = &sink;
    if (!parser_.feed(bytes, *this)) return streamEventTooLarge(parser_.maxEventBytes());
    return std::exchange(error_, std::nullopt);
  }
  void setMaxEventBytes(std::size_t n) override { parser_.setMaxEventBytes(n); }
  std::optional<Error> finish(ChunkSink&) override {
    if (error_) return error_;
    if (!stopped_) return Error{ErrorKind::UpstreamTruncated, "The upstream stream ended before message_stop."};
    return std::nullopt;
  }

 private:
  void onEvent(const SseEvent& event) override {
    if (error_ || stopped_) return;
    boost::system::error_code ec;
    bj::value v = readJson(event.data, ec);
    if (ec || !v.is_object()) {
      error_ = Error{ErrorKind::UpstreamBadResponse, "The upstream sent a stream event that is not JSON."};
      return;
    }
    const bj::object& o = v.get_object();
    std::string_view type = json::strOr(o, "type");
    ChatChunk chunk;
    if (type == "message_start") {
      chunk.start = true;
      if (const auto* m = json::obj(o, "message")) {
        chunk.id = json::strOr(*m, "id");
        chunk.model = json::strOr(*m, "model");
        if (const auto* u = json::obj(*m, "usage")) {
          usage_ = readAnthropicUsage(*u);
          usage_.completion_tokens = std::max<std::int64_t>(usage_.completion_tokens, 0);
        }
      }
    } else if (type == "content_block_start") {
      const auto* block = json::obj(o, "content_block");
      if (!block || json::strOr(*block, "type") != "tool_use") return;
      int index = static_cast<int>(json::integer(o, "index").value_or(0));
      ToolCallDelta d;
      d.index = tools_;
      d.id = json::strOr(*block, "id");
      d.name = json::strOr(*block, "name");
      block_tool_[index] = tools_++;
      chunk.tool_calls.push_back(std::move(d));
    } else if (type == "content_block_delta") {
      const auto* delta = json::obj(o, "delta");
      if (!delta) return;
      std::string_view dt = json::strOr(*delta, "type");
      if (dt == "text_delta") {
        chunk.content = json::strOr(*delta, "text");
        if (chunk.content.empty()) return;
      } else if (dt == "input_json_delta") {
        auto it = block_tool_.find(static_cast<int>(json::integer(o, "index").value_or(-1)));
        if (it == block_tool_.end()) return;
        std::string_view partial = json::strOr(*delta, "partial_json");
        if (partial.empty()) return;
        chunk.tool_calls.push_back(ToolCallDelta{it->second, {}, {}, std::string(partial)});
      } else {
        return;  // thinking / signature deltas: not part of the chat answer
      }
    } else if (type == "message_delta") {
      if (const auto* delta = json::obj(o, "delta"))
        if (auto stop = json::str(*delta, "stop_reason")) chunk.finish_reason = stopToFinish(*stop);
      if (const auto* u = json::obj(o, "usage")) {
        Usage later = readAnthropicUsage(*u);
        if (later.completion_tokens >= 0) usage_.completion_tokens = later.completion_tokens;
        if (json::integer(*u, "input_tokens")) usage_.prompt_tokens = later.prompt_tokens;
        if (later.cached_tokens >= 0) usage_.cached_tokens = later.cached_tokens;
      }
      chunk.usage = usage_;
    } else if (type == "message_stop") {
      stopped_ = true;
      return;
    } else if (type == "error") {
      const auto* err = json::obj(o, "error");
      error_ = Error{ErrorKind::UpstreamInterrupted,
                     "The upstream reported an error: " + std::string(err ? json::strOr(*err, "message") : "unknown")};
      return;
    } else {
      return;  // ping, content_block_stop, unknown future events
    }
    sink_->onChunk(chunk);
  }

  SseParser parser_;
  ChunkSink* sink_ = nullptr;
  std::optional<Error> error_;
  Usage usage_;
  std::map<int, int> block_tool_;  // content block index -> tool call index
  int tools_ = 0;
  bool stopped_ = false;
};

class AnthropicCodec final : public VendorCodec {
 public:
  std::variant<EncodedRequest, Error> encodeRequest(const bj::object& chat, const EncodeOptions& options) const override {
    auto body = chatToAnthropic(chat, options);
    if (auto* e = std::get_if<Error>(&body)) return std::move(*e);
    EncodedRequest req;
    req.path = "/messages";
    req.body = bj::serialize(std::get<bj::object>(body));
    if (options.stream) req.accept = "text/event-stream";
    return req;
  }

  std::variant<ChatResult, Error> decodeResponse(std::string_view body) const override {
    auto parsed = parseJsonObject(body, "a message");
    if (auto* e = std::get_if<Error>(&parsed)) return std::move(*e);
    const bj::object& o = std::get<bj::object>(parsed);
    const auto* content = json::arr(o, "content");
    if (!content) return Error{ErrorKind::UpstreamBadResponse, "The upstream sent a message without content."};
    ChatResult r;
    r.id = json::strOr(o, "id");
    r.model = json::strOr(o, "model");
    for (const auto& bv : *content) {
      const bj::object* b = bv.if_object();
      if (!b) continue;
      std::string_view type = json::strOr(*b, "type");
      if (type == "text") {
        r.content += json::strOr(*b, "text");
      } else if (type == "tool_use") {
        const bj::value* input = b->if_contains("input");
        r.tool_calls.push_back(ToolCall{std::string(json::strOr(*b, "id")), std::string(json::strOr(*b, "name")),
                                        input ? bj::serialize(*input) : std::string("{}")});
      }
    }
    r.finish_reason = stopToFinish(json::strOr(o, "stop_reason", "end_turn"));
    if (const auto* u = json::obj(o, "usage")) r.usage = readAnthropicUsage(*u);
    return r;
  }

  std::unique_ptr<ChatStreamDecoder> streamDecoder() const override { return std::make_unique<AnthropicStreamDecoder>(); }

  UpstreamErrorInfo decodeError(int status, std::string_view body) const override {
    UpstreamErrorInfo info;
    info.status = status;
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (!ec && v.is_object())
      if (const auto* err = json::obj(v.get_object(), "error")) {
        info.type = json::strOr(*err, "type");
        info.message = json::strOr(*err, "message");
      }
    if (info.message.empty()) info.message = "The upstream answered with HTTP status " + std::to_string(status) + ".";
    return info;
  }
};

// ---- Anthropic request -> OpenAI chat (client side) ---------------------------------

// Text blocks as one string; separate blocks stay separate lines.
std::string blockText(const bj::value& content) {
  if (content.is_string()) return std::string(content.get_string());
  std::string text;
  if (content.is_array())
    for (const auto& b : content.get_array())
      if (const auto* o = b.if_object(); o && json::strOr(*o, "type") == "text") {
        if (!text.empty()) text += '\n';
        text += json::strOr(*o, "text");
      }
  return text;
}

std::variant<bj::object, Error> anthropicToChat(const bj::object& req) {
  bj::object chat;
  bj::array messages;
  if (const auto* system = req.if_contains("system")) {
    std::string text = blockText(*system);
    if (!text.empty()) messages.push_back(bj::object{{"role", "system"}, {"content", text}});
  }
  const auto* msgs = json::arr(req, "messages");
  if (!msgs) return invalid("messages: Field required");
  for (std::size_t i = 0; i < msgs->size(); ++i) {
    const std::string where = "messages." + std::to_string(i);
    const bj::object* m = (*msgs)[i].if_object();
    if (!m) return invalid(where + ": must be an object");
    std::string_view role = json::strOr(*m, "role");
    const bj::value* content = m->if_contains("content");
    if (!content) return invalid(where + ".content: Field required");
    if (role != "user" && role != "assistant") return invalid(where + ".role: must be 'user' or 'assistant'");
    if (content->is_string()) {
      messages.push_back(bj::object{{"role", role}, {"content", content->get_string()}});
      continue;
    }
    if (!content->is_array()) return invalid(where + ".content: must be a string or an array of blocks");
    bj::array parts;
    std::string text;
    bj::array tool_calls;
    for (std::size_t j = 0; j < content->get_array().size(); ++j) {
      const std::string bw = where + ".content." + std::to_string(j);
      const bj::object* b = content->get_array()[j].if_object();
      if (!b) return invalid(bw + ": must be an object");
      std::string_view type = json::strOr(*b, "type");
      if (type == "text") {
        if (role == "assistant") text += json::strOr(*b, "text");
        else parts.push_back(bj::object{{"type", "text"}, {"text", json::strOr(*b, "text")}});
      } else if (type == "image") {
        const bj::object* src = json::obj(*b, "source");
        if (!src) return invalid(bw + ".source: Field required");
        std::string url;
        if (json::strOr(*src, "type") == "base64")
          url = "data:" + std::string(json::strOr(*src, "media_type")) + ";base64," + std::string(json::strOr(*src, "data"));
        else if (json::strOr(*src, "type") == "url")
          url = json::strOr(*src, "url");
        else
          return invalid(bw + ".source.type: only 'base64' and 'url' images can be translated");
        parts.push_back(bj::object{{"type", "image_url"}, {"image_url", bj::object{{"url", url}}}});
      } else if (type == "tool_use") {
        const bj::value* input = b->if_contains("input");
        tool_calls.push_back(bj::object{
            {"id", json::strOr(*b, "id")},
            {"type", "function"},
            {"function", bj::object{{"name", json::strOr(*b, "name")}, {"arguments", input ? bj::serialize(*input) : "{}"}}}});
      } else if (type == "tool_result") {
        // A tool result becomes its own `tool` message, before the rest of the turn.
        const bj::value* rc = b->if_contains("content");
        std::string result = rc ? blockText(*rc) : std::string();
        if (json::truthy(*b, "is_error")) result = "Error: " + result;
        messages.push_back(bj::object{{"role", "tool"}, {"tool_call_id", json::strOr(*b, "tool_use_id")}, {"content", result}});
      } else if (type == "thinking" || type == "redacted_thinking") {
        continue;  // the model's own reasoning: not part of another model's context
      } else {
        return invalid(bw + ".type: '" + std::string(type) + "' blocks cannot be translated for this model");
      }
    }
    if (role == "assistant") {
      if (text.empty() && tool_calls.empty()) continue;
      bj::object am{{"role", "assistant"}};
      if (text.empty()) am["content"] = nullptr;
      else am["content"] = text;
      if (!tool_calls.empty()) am["tool_calls"] = std::move(tool_calls);
      messages.push_back(std::move(am));
    } else if (!parts.empty()) {
      messages.push_back(bj::object{{"role", "user"}, {"content", std::move(parts)}});
    }
  }
  chat["messages"] = std::move(messages);
  if (auto model = json::str(req, "model")) chat["model"] = *model;
  if (auto mt = json::integer(req, "max_tokens")) chat["max_tokens"] = *mt;
  for (std::string_view key : {"temperature", "top_p"})
    if (const auto* v = req.if_contains(key); v && v->is_number()) chat[key] = v->to_number<double>();
  if (const auto* stop = json::arr(req, "stop_sequences"); stop && !stop->empty()) chat["stop"] = *stop;
  if (json::truthy(req, "stream")) chat["stream"] = true;
  if (const auto* tools = json::arr(req, "tools"); tools && !tools->empty()) {
    bj::array ctools;
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const bj::object* t = (*tools)[i].if_object();
      if (!t) return invalid("tools." + std::to_string(i) + ": must be an object");
      std::string_view type = json::strOr(*t, "type", "custom");
      if (type != "custom")
        return invalid("tools." + std::to_string(i) + ".type: server tool '" + std::string(type) +
                       "' is only available on Anthropic models");
      bj::object fn{{"name", json::strOr(*t, "name")}};
      if (auto d = json::str(*t, "description")) fn["description"] = *d;
      if (const auto* schema = json::obj(*t, "input_schema")) fn["parameters"] = *schema;
      ctools.push_back(bj::object{{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(ctools);
  }
  if (const auto* tc = json::obj(req, "tool_choice")) {
    std::string_view type = json::strOr(*tc, "type");
    if (type == "any") chat["tool_choice"] = "required";
    else if (type == "none") chat["tool_choice"] = "none";
    else if (type == "tool")
      chat["tool_choice"] = bj::object{{"type", "function"}, {"function", bj::object{{"name", json::strOr(*tc, "name")}}}};
    else chat["tool_choice"] = "auto";
    if (json::truthy(*tc, "disable_parallel_tool_use")) chat["parallel_tool_calls"] = false;
  }
  if (const auto* md = json::obj(req, "metadata"))
    if (auto user = json::str(*md, "user_id")) chat["user"] = *user;
  return chat;
}

bj::object anthropicUsage(const Usage& u) {
  const std::int64_t cached = std::max<std::int64_t>(u.cached_tokens, 0);
  bj::object o{{"input_tokens", std::max<std::int64_t>(u.prompt_tokens - cached, 0)},
               {"output_tokens", std::max<std::int64_t>(u.completion_tokens, 0)}};
  if (u.cached_tokens >= 0) o["cache_read_input_tokens"] = u.cached_tokens;
  return o;
}

void emitEvent(std::string_view name, const bj::object& data, std::string& out) {
  out.append("event: ").append(name).append("\ndata: ").append(bj::serialize(data)).append("\n\n");
}

class AnthropicStreamEncoder final : public ChatStreamEncoder {
 public:
  explicit AnthropicStreamEncoder(InboundOptions options) : options_(std::move(options)) {}

  void onChunk(const ChatChunk& chunk, std::string& out) override {
    if (chunk.usage) usage_ = *chunk.usage;
    if (!started_) start(chunk.id, out);
    if (!chunk.content.empty()) {
      if (open_ != Open::Text) {
        closeBlock(out);
        emitEvent("content_block_start",
                  bj::object{{"type", "content_block_start"}, {"index", block_},
                             {"content_block", bj::object{{"type", "text"}, {"text", ""}}}},
                  out);
        open_ = Open::Text;
      }
      emitEvent("content_block_delta",
                bj::object{{"type", "content_block_delta"}, {"index", block_},
                           {"delta", bj::object{{"type", "text_delta"}, {"text", chunk.content}}}},
                out);
    }
    for (const auto& d : chunk.tool_calls) {
      auto it = tool_block_.find(d.index);
      if (it == tool_block_.end()) {
        closeBlock(out);
        it = tool_block_.emplace(d.index, block_).first;
        emitEvent("content_block_start",
                  bj::object{{"type", "content_block_start"}, {"index", block_},
                             {"content_block", bj::object{{"type", "tool_use"},
                                                          {"id", d.id.empty() ? randomId("toolu_") : d.id},
                                                          {"name", d.name},
                                                          {"input", bj::object{}}}}},
                  out);
        open_ = Open::Tool;
      }
      if (!d.arguments.empty())
        emitEvent("content_block_delta",
                  bj::object{{"type", "content_block_delta"}, {"index", it->second},
                             {"delta", bj::object{{"type", "input_json_delta"}, {"partial_json", d.arguments}}}},
                  out);
    }
    if (!chunk.finish_reason.empty()) finish_reason_ = chunk.finish_reason;
  }

  void finish(std::string& out) override {
    if (!started_) start({}, out);
    closeBlock(out);
    // Cumulative totals, as Anthropic's message_delta: input only when the upstream
    // reported it, so a client keeps message_start's estimate rather than a 0.
    bj::object usage = anthropicUsage(usage_);
    if (usage_.prompt_tokens < 0) usage.erase("input_tokens");
    emitEvent("message_delta",
              bj::object{{"type", "message_delta"},
                         {"delta", bj::object{{"stop_reason", finishToStop(finish_reason_)}, {"stop_sequence", nullptr}}},
                         {"usage", std::move(usage)}},
              out);
    emitEvent("message_stop", bj::object{{"type", "message_stop"}}, out);
  }

  void fail(const Error& error, std::string& out) override {
    emitEvent("error", bj::object{{"type", "error"}, {"error", bj::object{{"type", anthropicErrorType(error.httpStatus())},
                                                                          {"message", error.message}}}},
              out);
  }

 private:
  enum class Open { None, Text, Tool };

  void start(const std::string& id, std::string& out) {
    started_ = true;
    // Clients (LangChain's ChatAnthropic) read input tokens only here. OpenAI-format
    // upstreams report usage last, so unless this first chunk has it, the estimate.
    Usage first = usage_;
    if (first.prompt_tokens < 0) first.prompt_tokens = options_.estimated_input_tokens;
    bj::object usage = anthropicUsage(first);
    emitEvent("message_start",
              bj::object{{"type", "message_start"},
                         {"message", bj::object{{"id", id.rfind("msg_", 0) == 0 ? id : randomId("msg_")},
                                                {"type", "message"},
                                                {"role", "assistant"},
                                                {"model", options_.model},
                                                {"content", bj::array{}},
                                                {"stop_reason", nullptr},
                                                {"stop_sequence", nullptr},
                                                {"usage", std::move(usage)}}}},
              out);
  }

  void closeBlock(std::string& out) {
    if (open_ == Open::None) return;
    emitEvent("content_block_stop", bj::object{{"type", "content_block_stop"}, {"index", block_}}, out);
    open_ = Open::None;
    ++block_;
  }

  InboundOptions options_;
  bool started_ = false;
  Open open_ = Open::None;
  int block_ = 0;
  std::map<int, int> tool_block_;  // tool call index -> content block index
  std::string finish_reason_ = "stop";
  Usage usage_;
};

class AnthropicInbound final : public InboundCodec {
 public:
  std::variant<bj::object, Error> toChat(std::string_view body) const override {
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (ec || !v.is_object()) return Error{ErrorKind::InvalidJson, "The request body is not a JSON object."};
    return anthropicToChat(v.get_object());
  }

  std::string encodeResult(const ChatResult& r, const InboundOptions& options) const override {
    bj::array content;
    if (!r.content.empty()) content.push_back(bj::object{{"type", "text"}, {"text", r.content}});
    for (const auto& c : r.tool_calls) {
      boost::system::error_code ec;
      bj::value input = readJson(c.arguments.empty() ? std::string_view("{}") : std::string_view(c.arguments), ec);
      if (ec || !input.is_object()) input = bj::object{};
      content.push_back(bj::object{{"type", "tool_use"},
                                   {"id", c.id.empty() ? randomId("toolu_") : c.id},
                                   {"name", c.name},
                                   {"input", std::move(input)}});
    }
    bj::object o{{"id", r.id.rfind("msg_", 0) == 0 ? r.id : randomId("msg_")},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", options.model},
                 {"content", std::move(content)},
                 {"stop_reason", finishToStop(r.finish_reason)},
                 {"stop_sequence", nullptr},
                 {"usage", anthropicUsage(r.usage)}};
    return bj::serialize(o);
  }

  std::unique_ptr<ChatStreamEncoder> streamEncoder(const InboundOptions& options) const override {
    return std::make_unique<AnthropicStreamEncoder>(options);
  }

  std::int64_t estimatePromptTokens(std::string_view body) const override {
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    return !ec && v.is_object() ? estimateAnthropicTokens(v.get_object()) : -1;
  }

  std::string encodeUpstreamError(const UpstreamErrorInfo& e) const override {
    return bj::serialize(bj::object{
        {"type", "error"}, {"error", bj::object{{"type", anthropicErrorType(e.status)}, {"message", e.message}}}});
  }
};

}  // namespace

Usage anthropicUsageFrom(const bj::object& usage) { return readAnthropicUsage(usage); }

const InboundCodec& anthropicInbound() {
  static const AnthropicInbound codec;
  return codec;
}

std::unique_ptr<VendorCodec> makeAnthropicCodec() { return std::make_unique<AnthropicCodec>(); }

}  // namespace tahua
