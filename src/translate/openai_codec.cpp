// OpenAI chat completions on both sides of a translation: as the vendor format (an
// Anthropic-SDK client reaching an OpenAI-compatible server) and as the client's API
// (an OpenAI-SDK client reaching Anthropic, Gemini or Bedrock). The canonical form *is*
// this format, so the request side is nearly an identity.
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>

#include "sse/sse_parser.h"
#include "core/json_read.h"
#include "translate/inbound.h"
#include "translate/json_util.h"

namespace tahua {
namespace bj = boost::json;

std::string_view openAIErrorType(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "upstream_error" : "invalid_request_error";
  }
}

namespace {

using codec::nowSeconds;

Usage readOpenAIUsage(const bj::object& u) {
  Usage usage;
  usage.prompt_tokens = json::integer(u, "prompt_tokens").value_or(-1);
  usage.completion_tokens = json::integer(u, "completion_tokens").value_or(-1);
  if (const auto* details = json::obj(u, "prompt_tokens_details"))
    usage.cached_tokens = json::integer(*details, "cached_tokens").value_or(-1);
  return usage;
}

bj::object usageObject(const Usage& u) {
  bj::object o;
  const std::int64_t in = std::max<std::int64_t>(u.prompt_tokens, 0), out = std::max<std::int64_t>(u.completion_tokens, 0);
  o["prompt_tokens"] = in;
  o["completion_tokens"] = out;
  o["total_tokens"] = in + out;
  if (u.cached_tokens >= 0) o["prompt_tokens_details"] = bj::object{{"cached_tokens", u.cached_tokens}};
  return o;
}

// Text of a message's content: a string, or the text parts of an array.
std::string contentText(const bj::value* content) {
  if (!content) return {};
  if (content->is_string()) return std::string(content->get_string());
  std::string text;
  if (content->is_array())
    for (const auto& part : content->get_array())
      if (part.is_object())
        if (auto t = json::str(part.get_object(), "text")) text += *t;
  return text;
}

// ---- vendor side --------------------------------------------------------------------

class OpenAIStreamDecoder final : public ChatStreamDecoder, private SseSink {
 public:
  std::optional<Error> feed(std::string_view bytes, ChunkSink& sink) override {
    sink_ = &sink;
    if (!parser_.feed(bytes, *this)) return streamEventTooLarge(parser_.maxEventBytes());
    return std::exchange(error_, std::nullopt);
  }
  void setMaxEventBytes(std::size_t n) override { parser_.setMaxEventBytes(n); }
  std::optional<Error> finish(ChunkSink& sink) override {
    if (error_) return error_;
    if (!done_ && !finished_) return Error{ErrorKind::UpstreamTruncated, "The upstream stream ended before it was complete."};
    return std::nullopt;
  }

 private:
  void onEvent(const SseEvent& event) override {
    if (error_ || done_) return;
    if (event.data == "[DONE]") {
      done_ = true;
      return;
    }
    boost::system::error_code ec;
    bj::value v = readJson(event.data, ec);
    if (ec || !v.is_object()) {
      error_ = Error{ErrorKind::UpstreamBadResponse, "The upstream sent a stream event that is not JSON."};
      return;
    }
    const bj::object& o = v.get_object();
    if (const auto* err = json::obj(o, "error")) {
      error_ = Error{ErrorKind::UpstreamInterrupted, "The upstream reported an error: " + std::string(json::strOr(*err, "message"))};
      return;
    }
    ChatChunk chunk;
    if (!started_) {
      chunk.start = true;
      chunk.id = json::strOr(o, "id");
      chunk.model = json::strOr(o, "model");
      started_ = true;
    }
    if (const auto* choices = json::arr(o, "choices"); choices && !choices->empty() && (*choices)[0].is_object()) {
      const bj::object& choice = (*choices)[0].get_object();
      if (const auto* delta = json::obj(choice, "delta")) {
        if (auto c = json::str(*delta, "content")) chunk.content = *c;
        if (const auto* calls = json::arr(*delta, "tool_calls")) {
          for (const auto& cv : *calls) {
            if (!cv.is_object()) continue;
            const bj::object& call = cv.get_object();
            ToolCallDelta d;
            d.index = static_cast<int>(json::integer(call, "index").value_or(0));
            d.id = json::strOr(call, "id");
            if (const auto* fn = json::obj(call, "function")) {
              d.name = json::strOr(*fn, "name");
              d.arguments = json::strOr(*fn, "arguments");
            }
            chunk.tool_calls.push_back(std::move(d));
          }
        }
      }
      if (auto fr = json::str(choice, "finish_reason")) {
        chunk.finish_reason = *fr;
        finished_ = true;
      }
    }
    if (const auto* u = json::obj(o, "usage")) chunk.usage = readOpenAIUsage(*u);
    sink_->onChunk(chunk);
  }

  SseParser parser_;
  ChunkSink* sink_ = nullptr;
  std::optional<Error> error_;
  bool started_ = false;
  bool finished_ = false;
  bool done_ = false;
};

class OpenAIChatCodec final : public VendorCodec {
 public:
  std::variant<EncodedRequest, Error> encodeRequest(const bj::object& chat, const EncodeOptions& options) const override {
    bj::object body = chat;
    body["model"] = options.upstream_model;
    if (options.stream) {
      body["stream"] = true;
      // Usage is what metering needs; the encoder for the client decides what it sees.
      if (options.stream_usage) body["stream_options"] = bj::object{{"include_usage", true}};
      else body.erase("stream_options");
    } else {
      body.erase("stream_options");
    }
    EncodedRequest req;
    req.path = "/chat/completions";
    req.body = bj::serialize(body);
    if (options.stream) req.accept = "text/event-stream";
    return req;
  }

  std::variant<ChatResult, Error> decodeResponse(std::string_view body) const override {
    auto parsed = parseJsonObject(body, "a chat completion");
    if (auto* e = std::get_if<Error>(&parsed)) return std::move(*e);
    const bj::object& o = std::get<bj::object>(parsed);
    ChatResult r;
    r.id = json::strOr(o, "id");
    r.model = json::strOr(o, "model");
    const auto* choices = json::arr(o, "choices");
    if (!choices || choices->empty() || !(*choices)[0].is_object())
      return Error{ErrorKind::UpstreamBadResponse, "The upstream sent a chat completion without choices."};
    const bj::object& choice = (*choices)[0].get_object();
    r.finish_reason = json::strOr(choice, "finish_reason", "stop");
    if (const auto* msg = json::obj(choice, "message")) {
      r.content = contentText(msg->if_contains("content"));
      if (const auto* calls = json::arr(*msg, "tool_calls")) {
        for (const auto& cv : *calls) {
          if (!cv.is_object()) continue;
          ToolCall call;
          call.id = json::strOr(cv.get_object(), "id");
          if (const auto* fn = json::obj(cv.get_object(), "function")) {
            call.name = json::strOr(*fn, "name");
            call.arguments = json::strOr(*fn, "arguments", "{}");
          }
          r.tool_calls.push_back(std::move(call));
        }
      }
    }
    if (const auto* u = json::obj(o, "usage")) r.usage = readOpenAIUsage(*u);
    return r;
  }

  std::unique_ptr<ChatStreamDecoder> streamDecoder() const override { return std::make_unique<OpenAIStreamDecoder>(); }

  UpstreamErrorInfo decodeError(int status, std::string_view body) const override {
    UpstreamErrorInfo info;
    info.status = status;
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (!ec && v.is_object()) {
      const bj::object& o = v.get_object();
      const bj::object* err = json::obj(o, "error");
      const bj::object& src = err ? *err : o;
      info.message = json::strOr(src, "message");
      info.type = json::strOr(src, "type");
      if (info.type.empty()) info.type = json::strOr(src, "code");
    }
    if (info.message.empty()) info.message = "The upstream answered with HTTP status " + std::to_string(status) + ".";
    return info;
  }
};

// ---- client side --------------------------------------------------------------------

class OpenAIChatStreamEncoder final : public ChatStreamEncoder {
 public:
  explicit OpenAIChatStreamEncoder(InboundOptions options) : options_(std::move(options)), created_(nowSeconds()) {}

  void onChunk(const ChatChunk& chunk, std::string& out) override {
    if (chunk.usage) usage_ = *chunk.usage;
    if (id_.empty()) id_ = chunk.id.empty() ? randomId("chatcmpl-") : chunk.id;
    bj::object delta;
    if (!sent_role_) {
      delta["role"] = "assistant";
      sent_role_ = true;
      if (chunk.content.empty() && chunk.tool_calls.empty()) delta["content"] = "";
    }
    if (!chunk.content.empty()) delta["content"] = chunk.content;
    if (!chunk.tool_calls.empty()) {
      bj::array calls;
      for (const auto& d : chunk.tool_calls) {
        bj::object call{{"index", d.index}};
        bj::object fn;
        if (!d.id.empty()) {
          call["id"] = d.id;
          call["type"] = "function";
        }
        if (!d.name.empty()) fn["name"] = d.name;
        fn["arguments"] = d.arguments;
        call["function"] = std::move(fn);
        calls.push_back(std::move(call));
      }
      delta["tool_calls"] = std::move(calls);
    }
    if (delta.empty() && chunk.finish_reason.empty()) return;  // nothing the client needs (a ping)
    bj::object choice{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}};
    if (chunk.finish_reason.empty()) choice["finish_reason"] = nullptr;
    else choice["finish_reason"] = chunk.finish_reason;
    bj::object o = head();
    o["choices"] = bj::array{std::move(choice)};
    if (options_.include_usage) o["usage"] = nullptr;
    emit(o, out);
  }

  void finish(std::string& out) override {
    if (options_.include_usage) {
      if (id_.empty()) id_ = randomId("chatcmpl-");
      bj::object o = head();
      o["choices"] = bj::array{};
      o["usage"] = usageObject(usage_);
      emit(o, out);
    }
    out += "data: [DONE]\n\n";
  }

  void fail(const Error& error, std::string& out) override { out += error.toOpenAIStreamEvent(); }

 private:
  bj::object head() const {
    return bj::object{{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", options_.model},
                      {"system_fingerprint", nullptr}};
  }
  static void emit(const bj::object& o, std::string& out) { out.append("data: ").append(bj::serialize(o)).append("\n\n"); }

  InboundOptions options_;
  std::int64_t created_;
  std::string id_;
  bool sent_role_ = false;
  Usage usage_;
};

class OpenAIChatInbound final : public InboundCodec {
 public:
  std::variant<bj::object, Error> toChat(std::string_view body) const override {
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (ec || !v.is_object()) return Error{ErrorKind::InvalidJson, "The request body is not a JSON object."};
    return std::move(v.get_object());
  }

  std::string encodeResult(const ChatResult& r, const InboundOptions& options) const override {
    bj::object message{{"role", "assistant"}};
    if (r.content.empty() && !r.tool_calls.empty()) message["content"] = nullptr;
    else message["content"] = r.content;
    if (!r.tool_calls.empty()) {
      bj::array calls;
      for (const auto& c : r.tool_calls)
        calls.push_back(bj::object{{"id", c.id.empty() ? randomId("call_") : c.id},
                                   {"type", "function"},
                                   {"function", bj::object{{"name", c.name}, {"arguments", c.arguments}}}});
      message["tool_calls"] = std::move(calls);
    }
    message["refusal"] = nullptr;
    bj::object choice{{"index", 0}, {"message", std::move(message)}, {"logprobs", nullptr}, {"finish_reason", r.finish_reason}};
    bj::object o{{"id", r.id.empty() ? randomId("chatcmpl-") : r.id},
                 {"object", "chat.completion"},
                 {"created", nowSeconds()},
                 {"model", options.model},
                 {"choices", bj::array{std::move(choice)}},
                 {"usage", usageObject(r.usage)},
                 {"system_fingerprint", nullptr}};
    return bj::serialize(o);
  }

  std::unique_ptr<ChatStreamEncoder> streamEncoder(const InboundOptions& options) const override {
    return std::make_unique<OpenAIChatStreamEncoder>(options);
  }

  std::string encodeUpstreamError(const UpstreamErrorInfo& e) const override {
    bj::object inner{{"message", e.message}, {"type", openAIErrorType(e.status)}, {"param", nullptr}};
    if (e.type.empty()) inner["code"] = nullptr;
    else inner["code"] = e.type;
    return bj::serialize(bj::object{{"error", std::move(inner)}});
  }
};

}  // namespace

const InboundCodec& openAIChatInbound() {
  static const OpenAIChatInbound codec;
  return codec;
}

std::unique_ptr<VendorCodec> makeOpenAIChatCodec() { return std::make_unique<OpenAIChatCodec>(); }

}  // namespace tahua
