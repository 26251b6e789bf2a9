#include "filters/cache/cached_answer_forms.h"

#include <boost/json.hpp>

#include <map>

#include "core/json_read.h"
#include "sse/sse_parser.h"

namespace tahua {
namespace bj = boost::json;
namespace {

// Chunks of a decoded stream, put together.
class Collector final : public ChunkSink {
 public:
  ChatResult result;
  void onChunk(const ChatChunk& c) override {
    if (!c.id.empty() && result.id.empty()) result.id = c.id;
    if (!c.model.empty() && result.model.empty()) result.model = c.model;
    result.content += c.content;
    for (const auto& d : c.tool_calls) {
      ToolCall& call = calls_[d.index];
      if (!d.id.empty()) call.id = d.id;
      if (!d.name.empty()) call.name = d.name;
      call.arguments += d.arguments;
    }
    if (!c.finish_reason.empty()) result.finish_reason = c.finish_reason;
    if (c.usage) result.usage = *c.usage;
  }
  ChatResult take() {
    for (auto& [i, call] : calls_) result.tool_calls.push_back(std::move(call));
    return std::move(result);
  }

 private:
  std::map<int, ToolCall> calls_;
};

std::optional<ChatResult> fromVendorFormat(const VendorCodec& codec, const CachedAnswer& a) {
  if (!a.streamed) {
    auto r = codec.decodeResponse(a.body);
    if (std::holds_alternative<Error>(r)) return std::nullopt;
    return std::move(std::get<ChatResult>(r));
  }
  auto decoder = codec.streamDecoder();
  decoder->setMaxEventBytes(a.body.size() + 1);
  Collector sink;
  if (decoder->feed(a.body, sink) || decoder->finish(sink)) return std::nullopt;
  return sink.take();
}

// The `response` object of a Responses answer: the body, or its stream's last event.
std::optional<bj::object> responsesObject(const CachedAnswer& a) {
  std::string text = a.body;
  if (a.streamed) {
    struct Last final : SseSink {
      std::string data;
      void onEvent(const SseEvent& ev) override {
        if (ev.event == "response.completed" || ev.event == "response.incomplete") data.assign(ev.data);
      }
    } last;
    SseParser parser(a.body.size() + 1);
    parser.feed(a.body, last);
    parser.feed("\n\n", last);
    text = std::move(last.data);
  }
  boost::system::error_code ec;
  bj::value v = readJson(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  if (a.streamed) {
    bj::value* r = v.get_object().if_contains("response");
    if (!r || !r->is_object()) return std::nullopt;
    return std::move(r->get_object());
  }
  return std::move(v.get_object());
}

std::optional<ChatResult> fromResponses(const CachedAnswer& a) {
  auto o = responsesObject(a);
  if (!o) return std::nullopt;
  ChatResult r;
  if (const bj::value* id = o->if_contains("id"); id && id->is_string()) r.id = std::string(id->get_string());
  if (const bj::value* output = o->if_contains("output"); output && output->is_array()) {
    for (const auto& item : output->get_array()) {
      const bj::object* it = item.if_object();
      if (!it) continue;
      const bj::value* type = it->if_contains("type");
      if (!type || !type->is_string()) continue;
      if (type->get_string() == "message") {
        if (const bj::value* c = it->if_contains("content"); c && c->is_array())
          for (const auto& part : c->get_array())
            if (const bj::object* p = part.if_object(); p && p->contains("text") && p->at("text").is_string())
              r.content += p->at("text").get_string();
      } else if (type->get_string() == "function_call") {
        ToolCall call;
        auto s = [&](std::string_view k) {
          const bj::value* v = it->if_contains(k);
          return v && v->is_string() ? std::string(v->get_string()) : std::string();
        };
        call.id = s("call_id");
        call.name = s("name");
        call.arguments = s("arguments");
        r.tool_calls.push_back(std::move(call));
      }
    }
  }
  const bj::value* status = o->if_contains("status");
  r.finish_reason = status && status->is_string() && status->get_string() == "incomplete" ? "length"
                    : r.tool_calls.empty()                                                  ? "stop"
                                                                                            : "tool_calls";
  r.usage = a.usage;
  return r;
}

const InboundCodec* codecFor(Endpoint e) {
  switch (e) {
    case Endpoint::ChatCompletions: return &openAIChatInbound();
    case Endpoint::Messages: return &anthropicInbound();
    case Endpoint::Responses: return &responsesInbound();
    default: return nullptr;
  }
}

}  // namespace

std::optional<ChatResult> decodeCachedAnswer(const CachedAnswer& a) {
  switch (static_cast<Endpoint>(a.endpoint)) {
    case Endpoint::ChatCompletions: return fromVendorFormat(*makeOpenAIChatCodec(), a);
    case Endpoint::Messages: return fromVendorFormat(*makeAnthropicCodec(), a);
    case Endpoint::Responses: return fromResponses(a);
    default: return std::nullopt;
  }
}

std::optional<AnswerForm> cachedAnswerAs(const CachedAnswer& a, Endpoint endpoint, bool stream, bool include_usage,
                                         const InboundOptions& options) {
  const bool same_form = static_cast<Endpoint>(a.endpoint) == endpoint && a.streamed == stream &&
                         (endpoint != Endpoint::ChatCompletions || !stream || a.include_usage == include_usage);
  if (same_form) return AnswerForm{a.body, a.content_type};
  const InboundCodec* inbound = codecFor(endpoint);
  if (!inbound) return std::nullopt;
  auto result = decodeCachedAnswer(a);
  if (!result) return std::nullopt;
  if (result->usage.prompt_tokens < 0 && a.usage.prompt_tokens >= 0) result->usage = a.usage;
  if (!stream) return AnswerForm{inbound->encodeResult(*result, options), "application/json"};
  std::string out;
  auto encoder = inbound->streamEncoder(options);
  ChatChunk first;
  first.start = true;
  first.id = result->id;
  first.model = result->model;
  first.content = result->content;
  for (std::size_t i = 0; i < result->tool_calls.size(); ++i) {
    const ToolCall& t = result->tool_calls[i];
    first.tool_calls.push_back(ToolCallDelta{static_cast<int>(i), t.id, t.name, t.arguments});
  }
  encoder->onChunk(first, out);
  ChatChunk last;
  last.finish_reason = result->finish_reason;
  if (result->usage.present()) last.usage = result->usage;
  encoder->onChunk(last, out);
  encoder->finish(out);
  return AnswerForm{std::move(out), "text/event-stream; charset=utf-8"};
}

}  // namespace tahua
