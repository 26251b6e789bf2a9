#include "providers/translation.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "core/json_read.h"
#include "core/json_scan.h"
#include "providers/secret_scrubber.h"
#include "sse/sse_parser.h"
#include "translate/json_util.h"

namespace tahua {
namespace bj = boost::json;

const InboundCodec* inboundFor(Endpoint e) {
  switch (e) {
    case Endpoint::ChatCompletions: return &openAIChatInbound();
    case Endpoint::Messages: return &anthropicInbound();
    case Endpoint::Responses: return &responsesInbound();
    default: return nullptr;
  }
}

std::uint16_t providerApiOf(Endpoint e) {
  ProviderApi api;
  switch (e) {
    case Endpoint::ChatCompletions: api = ProviderApi::Chat; break;
    case Endpoint::Completions: api = ProviderApi::Completions; break;
    case Endpoint::Embeddings: api = ProviderApi::Embeddings; break;
    case Endpoint::Responses: api = ProviderApi::Responses; break;
    case Endpoint::Moderations: api = ProviderApi::Moderations; break;
    case Endpoint::ImagesGenerations:
    case Endpoint::ImagesEdits: api = ProviderApi::Images; break;
    case Endpoint::AudioTranscriptions:
    case Endpoint::AudioTranslations:
    case Endpoint::AudioSpeech: api = ProviderApi::Audio; break;
    case Endpoint::Rerank: api = ProviderApi::Rerank; break;
    case Endpoint::Files:
    case Endpoint::FileObject:
    case Endpoint::FileContent:
    case Endpoint::Batches:
    case Endpoint::BatchObject:
    case Endpoint::BatchCancel: api = ProviderApi::Files; break;
    case Endpoint::Realtime: api = ProviderApi::Realtime; break;
    default: return 0;
  }
  return static_cast<std::uint16_t>(api);
}

namespace {

// What the one-shot endpoints report besides tokens: the images an answer carries (its
// `data` entries), and a rerank's `usage.total_tokens` alone (Jina, vLLM), billed as input.
void oneShotUsage(std::string& body, RequestContext& ctx) {
  if (ctx.endpoint == Endpoint::Rerank && ctx.usage.prompt_tokens < 0 && ctx.usage.total_tokens >= 0)
    ctx.usage.prompt_tokens = ctx.usage.total_tokens;
  if (ctx.endpoint == Endpoint::ImagesGenerations || ctx.endpoint == Endpoint::ImagesEdits)
    ctx.usage.images = topLevelArraySize(body, "data");
}

void applyUsage(Usage& usage, const Usage& t) {
  if (t.prompt_tokens >= 0) usage.prompt_tokens = t.prompt_tokens;
  if (t.completion_tokens >= 0) usage.completion_tokens = t.completion_tokens;
  if (t.cached_tokens >= 0) usage.cached_tokens = t.cached_tokens;
  if (usage.prompt_tokens >= 0 || usage.completion_tokens >= 0)
    usage.total_tokens = std::max<std::int64_t>(usage.prompt_tokens, 0) + std::max<std::int64_t>(usage.completion_tokens, 0);
}

// `"choices": []` — the usage-only chunk an include_usage stream ends with.
bool emptyChoices(std::string_view data) {
  auto at = data.find("\"choices\"");
  if (at == std::string_view::npos) return false;
  std::size_t i = at + 9;
  const auto skip = [&] {
    while (i < data.size() && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r')) ++i;
  };
  skip();
  if (i >= data.size() || data[i] != ':') return false;
  ++i;
  skip();
  if (i >= data.size() || data[i] != '[') return false;
  ++i;
  skip();
  return i < data.size() && data[i] == ']';
}

// The string value of the last `"<key>": "..."` in `data` (a finish or stop reason: no
// escapes in those words), or empty when the last one is null or there is none. A
// non-null "finish_reason" marks the last choice chunk of an OpenAI-format stream; the
// key closes the choice, so it is searched from the end (findLastKey).
std::string_view stringField(std::string_view data, std::string_view quoted_key) {
  const auto at = findLastKey(data, quoted_key);
  if (at == std::string_view::npos) return {};
  std::size_t i = at + quoted_key.size();
  while (i < data.size() && (data[i] == ' ' || data[i] == ':' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r')) ++i;
  if (i < data.size() && data[i] == '"') {
    const auto end = data.find('"', i + 1);
    if (end != std::string_view::npos) return data.substr(i + 1, end - i - 1);
  }
  return {};
}

bool looksLikeJsonObject(std::string_view body) {
  const auto at = body.find_first_not_of(" \t\r\n");
  return at != std::string_view::npos && body[at] == '{';
}

}  // namespace

std::string vendorErrorText(std::string_view body, std::size_t max) {
  std::string text;
  bool in_tag = false;
  bool space = false;
  for (char c : body) {
    if (c == '<') in_tag = true;
    else if (c == '>') {
      in_tag = false;
      space = true;
    } else if (!in_tag) {
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') space = true;
      else if (static_cast<unsigned char>(c) >= 0x20) {
        if (space && !text.empty()) text += ' ';
        space = false;
        text += c;
        if (text.size() >= max) {
          text += "...";
          break;
        }
      }
    }
  }
  return text;
}

namespace {

class PassThroughTranslator final : public ResponseTranslator, private SseSink {
 public:
  PassThroughTranslator(WireFormat format, bool strip, const ProviderConfig* provider)
      : format_(format), strip_(strip), provider_(provider) {}

  // A speech request's `input`: its characters (code points) are what it costs.
  void countCharacters(std::string_view body) {
    boost::system::error_code ec;
    const bj::value v = readJson(body, ec);
    const bj::value* input = !ec && v.is_object() ? v.get_object().if_contains("input") : nullptr;
    if (!input || !input->is_string()) return;
    characters_ = 0;
    for (const char c : input->get_string())
      if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++characters_;
  }

  void onResponseHead(ResponseHead& head, RequestContext& ctx) override {
    if (ctx.config) parser_.setMaxEventBytes(ctx.config->server.max_stream_event_bytes);
    ok_ = head.status >= 200 && head.status < 300;
    if (format_ == WireFormat::Audio && ok_ && characters_ >= 0) ctx.usage.characters = characters_;
    // Speech audio and a file's content go out as they come (speech's events, when it
    // asked for them, are a stream like any other).
    if (ok_ && !head.event_stream && (ctx.endpoint == Endpoint::AudioSpeech || ctx.endpoint == Endpoint::FileContent)) {
      raw_ = true;
      head.raw_stream = true;
    }
    // An error page that is not JSON (a proxy's HTML) is re-shaped in onBody.
    if (!ok_ && !head.event_stream) head.content_type = "application/json";
  }

  std::string_view onStreamBytes(std::string_view bytes, bool last, RequestContext& ctx) override {
    ctx_ = &ctx;
    if (ended_) return {};
    if (raw_) return bytes;
    std::string_view out = relay(bytes, last);
    // Never a silent end: an event longer than the bound, or a body that ended before
    // the vendor's end marker, closes the stream with an error event of its own.
    if (overflow_) return endWith(out, streamEventTooLarge(parser_.maxEventBytes()));
    if (last && ok_ && !complete_)
      return endWith(out, Error{ErrorKind::UpstreamTruncated, "The upstream stream ended before its end marker."});
    return out;
  }

  bool streamEnded() const override { return ended_; }

  void onBody(std::string& body, RequestContext& ctx) override {
    if (ctx.status < 200 || ctx.status >= 300) {
      checkError(body, ctx.status);
      return;
    }
    // A success that is not a JSON object (an HTML page, a cut body) would break every
    // SDK: it becomes a 502. Only the ends are looked at on the fast path; the usage
    // scan below reads the rest.
    if (format_ == WireFormat::Audio) {
      audioUsage(body, ctx.usage);  // text, srt and vtt answers are not JSON, and fine
      return;
    }
    if (!looksLikeJsonObject(body) || body.find_last_not_of(" \t\r\n") != body.rfind('}')) {
      notJson(body, ctx);
      return;
    }
    if (format_ == WireFormat::Anthropic) {
      boost::system::error_code ec;
      bj::value v = readJson(body, ec);
      if (ec || !v.is_object()) {
        notJson(body, ctx);
        return;
      }
      if (const auto* u = json::obj(v.get_object(), "usage")) applyUsage(ctx.usage, anthropicUsageFrom(*u));
      ctx.usage.finish = finishReasonFrom(json::strOr(v.get_object(), "stop_reason", ""));
      return;
    }
    extractOpenAIUsage(body, ctx.usage);  // chat.completion, responses' response object, embeddings
    ctx.usage.finish = finishReasonFrom(stringField(body, "\"finish_reason\""));
    oneShotUsage(body, ctx);
  }

  // Cutting the usage chunk returns whole events only; otherwise the parser knows.
  bool atEventBoundary() const override { return strip_ || parser_.atEventBoundary(); }

  std::string streamErrorEvent(const Error& error) const override {
    switch (format_) {
      case WireFormat::OpenAIChat:
      case WireFormat::Audio: return error.toOpenAIStreamEvent();
      case WireFormat::Anthropic: return "event: error\ndata: " + error.toAnthropicJson() + "\n\n";
      case WireFormat::Responses:
        return "event: error\ndata: " +
               bj::serialize(bj::object{{"type", "error"}, {"code", error.code()}, {"message", error.message}, {"param", nullptr}}) +
               "\n\n";
    }
    return {};
  }

 private:
  // The upstream bytes to relay, minus the usage-only chunk when it is hidden. Sets
  // overflow_ when an event outgrew the bound (its bytes so far still go out).
  std::string_view relay(std::string_view bytes, bool last) {
    if (!strip_) {
      overflow_ = !parser_.feed(bytes, *this);
      return bytes;
    }
    // Cut at event boundaries: complete events go out (minus the usage-only one), an
    // unfinished one waits for its end. Upstreams send whole events, so usually nothing
    // is carried or cut and the input itself is returned: no copy, no buffer kept per
    // stream (a held stream's memory). Only a feed that drops an event or continues a
    // carried one is rebuilt in out_.
    bytes_ = bytes;
    start_ = 0;
    materialized_ = false;
    if (!parser_.feed(bytes, *this)) {
      overflow_ = true;
      strip_ = false;
      materialize();
      out_.append(carry_).append(bytes.substr(start_));
      carry_.clear();
      return out_;
    }
    if (!materialized_ && carry_.empty() && (start_ == bytes.size() || last)) return bytes;
    if (!materialized_) materialize();
    carry_.append(bytes.substr(start_));
    if (last) {
      out_.append(carry_);
      carry_.clear();
    }
    return out_;
  }

  static void notJson(std::string& body, RequestContext& ctx) {
    Error e{ErrorKind::UpstreamBadResponse, "The upstream answered HTTP " + std::to_string(ctx.status) + " with a body that is not JSON."};
    ctx.status = e.httpStatus();
    body = ctx.errorBody(e);
    ctx.fail(std::move(e));
  }

  // `out`, then (on a fresh line: an unfinished line or event before it is closed
  // first) the error event; the stream ends there.
  std::string_view endWith(std::string_view out, Error err) {
    if (out.data() != out_.data()) out_.assign(out);
    if (!parser_.atEventBoundary()) out_ += "\n\n";
    out_ += streamErrorEvent(err);
    ctx_->fail(std::move(err));
    ended_ = true;
    return out_;
  }

  void onEvent(const SseEvent& event) override {
    bool drop = false;
    switch (format_) {
      case WireFormat::OpenAIChat:
        if (event.data == "[DONE]") {
          complete_ = true;
          break;
        }
        if (extractOpenAIUsage(event.data, ctx_->usage)) drop = strip_ && emptyChoices(event.data);
        // A finished choice (some servers send no [DONE] after it) or the upstream's own
        // error object also end the stream as the upstream meant to.
        if (!complete_) {
          if (const auto reason = stringField(event.data, "\"finish_reason\""); !reason.empty()) {
            ctx_->usage.finish = finishReasonFrom(reason);
            complete_ = true;
          } else if (event.data.starts_with("{\"error\"")) {
            complete_ = true;
          }
        }
        break;
      case WireFormat::Anthropic:
        if (event.event == "message_start" || event.event == "message_delta") readJsonUsage(event.data, "message");
        if (event.event == "message_delta") {
          if (const auto reason = stringField(event.data, "\"stop_reason\""); !reason.empty()) ctx_->usage.finish = finishReasonFrom(reason);
        } else if (event.event == "message_stop" || event.event == "error") complete_ = true;
        break;
      case WireFormat::Audio:
        // transcript.text.done / speech.audio.done carry the usage and end the stream.
        if (event.data.find("\"transcript.text.done\"") != std::string_view::npos ||
            event.data.find("\"speech.audio.done\"") != std::string_view::npos) {
          audioUsage(event.data, ctx_->usage);
          complete_ = true;
        } else if (event.data.starts_with("{\"error\"") || event.event == "error") {
          complete_ = true;
        }
        break;
      case WireFormat::Responses:
        if (event.event == "response.completed" || event.event == "response.incomplete" || event.event == "response.failed") {
          readJsonUsage(event.data, "response");
          complete_ = true;
        } else if (event.event == "error") {
          complete_ = true;
        }
        break;
    }
    if (!strip_) return;
    const std::size_t end = parser_.eventEnd();
    // A kept event wholly inside this feed extends the run returned as a view.
    if (!drop && carry_.empty() && !materialized_) {
      start_ = end;
      return;
    }
    materialize();
    if (!drop) out_.append(carry_).append(bytes_.substr(start_, end - start_));
    carry_.clear();
    start_ = end;
  }

  // An audio answer's usage: {"usage":{"type":"duration","seconds":N}} (whisper), token
  // counts {"input_tokens","output_tokens"} (gpt-4o-transcribe, speech events), or a
  // verbose_json answer's top-level "duration".
  static void audioUsage(std::string_view json, Usage& usage) {
    if (!looksLikeJsonObject(json)) return;
    boost::system::error_code ec;
    const bj::value v = readJson(json, ec);
    if (ec || !v.is_object()) return;
    const bj::object& o = v.get_object();
    auto seconds = [](const bj::value* d) -> double {
      if (!d) return -1;
      if (d->is_double()) return d->get_double();
      if (d->is_int64()) return static_cast<double>(d->get_int64());
      if (d->is_uint64()) return static_cast<double>(d->get_uint64());
      return -1;
    };
    if (const auto* u = json::obj(o, "usage")) {
      if (json::strOr(*u, "type", "") == "duration") usage.audio_seconds = seconds(u->if_contains("seconds"));
      Usage t;
      t.prompt_tokens = json::integer(*u, "input_tokens").value_or(-1);
      t.completion_tokens = json::integer(*u, "output_tokens").value_or(-1);
      if (t.prompt_tokens >= 0 || t.completion_tokens >= 0) applyUsage(usage, t);
    }
    if (usage.audio_seconds < 0) usage.audio_seconds = seconds(o.if_contains("duration"));
  }

  // Switches this feed's output from a view of the input to out_: what was kept so far.
  void materialize() {
    if (materialized_) return;
    materialized_ = true;
    out_.assign(bytes_.substr(0, start_));
  }

  // Usage inside {"<outer>":{"usage":{..}}} or {"usage":{..}} (Anthropic's message_delta).
  void readJsonUsage(std::string_view data, std::string_view outer) {
    boost::system::error_code ec;
    bj::value v = readJson(data, ec);
    if (ec || !v.is_object()) return;
    const bj::object* o = &v.get_object();
    if (const auto* inner = json::obj(*o, outer)) o = inner;
    const auto* u = json::obj(*o, "usage");
    if (!u) return;
    if (format_ == WireFormat::Anthropic) {
      // message_start carries input (and a provisional output); message_delta the final output.
      Usage t = anthropicUsageFrom(*u);
      if (!json::integer(*u, "input_tokens")) t.prompt_tokens = -1;
      applyUsage(ctx_->usage, t);
    } else {
      Usage t;
      t.prompt_tokens = json::integer(*u, "input_tokens").value_or(-1);
      t.completion_tokens = json::integer(*u, "output_tokens").value_or(-1);
      if (const auto* d = json::obj(*u, "input_tokens_details")) t.cached_tokens = json::integer(*d, "cached_tokens").value_or(-1);
      applyUsage(ctx_->usage, t);
    }
  }

  // An upstream error passes through, minus anything that is not the upstream's to say:
  // the provider's credentials (a server echoing the key it rejected), and for
  // OpenAI-format errors a missing `type` is added (Azure sends only code + message), so
  // SDKs see the shape they parse. A body that is not an error object is left as is.
  void checkError(std::string& body, int status) {
    if (provider_) body = scrubSecrets(std::move(body), *provider_);
    if (!looksLikeJsonObject(body)) {
      // An HTML page from a proxy in front of the upstream, a plain-text 502: SDKs parse
      // errors as JSON, so the status is kept and the text re-shaped (and trimmed).
      UpstreamErrorInfo info;
      info.status = status;
      const std::string text = vendorErrorText(body, 200);
      info.message = "The upstream answered HTTP " + std::to_string(status) + (text.empty() ? "." : " with: " + text);
      body = (format_ == WireFormat::Anthropic ? anthropicInbound() : openAIChatInbound()).encodeUpstreamError(info);
      return;
    }
    if (format_ == WireFormat::Anthropic) return;
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (ec || !v.is_object()) return;
    bj::value* err = v.get_object().if_contains("error");
    if (!err || !err->is_object() || err->get_object().contains("type")) return;
    bj::object& e = err->get_object();
    e["type"] = openAIErrorType(status);
    if (!e.contains("param")) e["param"] = nullptr;
    if (!e.contains("code")) e["code"] = nullptr;
    body = bj::serialize(v);
  }

  WireFormat format_;
  bool strip_;
  const ProviderConfig* provider_;
  SseParser parser_;
  RequestContext* ctx_ = nullptr;
  std::string out_;
  std::string carry_;
  std::string_view bytes_;
  std::size_t start_ = 0;
  bool materialized_ = false;
  bool ok_ = true;         // a 2xx answer (only those must end with the end marker)
  bool complete_ = false;  // the vendor's end marker (or a finish, or its error) was seen
  bool overflow_ = false;  // an event outgrew server.max_stream_event_bytes
  bool ended_ = false;  // the stream was ended with an error event
  bool raw_ = false;    // bytes relayed as they come (speech audio)
  std::int64_t characters_ = -1;  // a speech request's input
};

class TranslatingTranslator final : public ResponseTranslator, private ChunkSink {
 public:
  TranslatingTranslator(const VendorCodec& codec, const InboundCodec& inbound, InboundOptions options,
                        const ProviderConfig& provider)
      : codec_(codec), inbound_(inbound), options_(std::move(options)), provider_(provider) {}

  void onResponseHead(ResponseHead& head, RequestContext& ctx) override {
    const bool ok = head.status >= 200 && head.status < 300;
    if (ok && ctx.facts.stream) {
      head.event_stream = true;
      head.content_type = "text/event-stream; charset=utf-8";
      decoder_ = codec_.streamDecoder();
      if (ctx.config) decoder_->setMaxEventBytes(ctx.config->server.max_stream_event_bytes);
      encoder_ = inbound_.streamEncoder(options_);
    } else {
      head.event_stream = false;
      head.content_type = "application/json";
    }
  }

  std::string_view onStreamBytes(std::string_view bytes, bool last, RequestContext& ctx) override {
    out_.clear();
    if (ended_ || !decoder_) return out_;
    ctx_ = &ctx;
    std::optional<Error> err;
    if (!bytes.empty()) err = decoder_->feed(bytes, *this);
    if (!err && last) err = decoder_->finish(*this);
    if (err) {
      err->message = scrubSecrets(std::move(err->message), provider_);
      encoder_->fail(*err, out_);
      ctx.fail(std::move(*err));
      ended_ = true;
    } else if (last) {
      encoder_->finish(out_);
    }
    return out_;
  }

  bool streamEnded() const override { return ended_; }

  void onBody(std::string& body, RequestContext& ctx) override {
    if (ctx.status < 200 || ctx.status >= 300) {
      UpstreamErrorInfo info = codec_.decodeError(ctx.status, body);
      info.message = scrubSecrets(std::move(info.message), provider_);
      body = inbound_.encodeUpstreamError(info);
      return;
    }
    auto decoded = codec_.decodeResponse(body);
    if (auto* err = std::get_if<Error>(&decoded)) {
      ctx.status = err->httpStatus();
      body = ctx.errorBody(*err);
      ctx.fail(std::move(*err));
      return;
    }
    const ChatResult& result = std::get<ChatResult>(decoded);
    applyUsage(ctx.usage, result.usage);
    ctx.usage.finish = finishReasonFrom(result.finish_reason);
    body = inbound_.encodeResult(result, options_);
  }

  std::string streamErrorEvent(const Error& error) const override {
    std::string out;
    if (encoder_) encoder_->fail(error, out);
    else out = error.toOpenAIStreamEvent();
    return out;
  }

 private:
  void onChunk(const ChatChunk& chunk) override {
    if (chunk.usage) applyUsage(ctx_->usage, *chunk.usage);
    if (!chunk.finish_reason.empty()) ctx_->usage.finish = finishReasonFrom(chunk.finish_reason);
    encoder_->onChunk(chunk, out_);
  }

  const VendorCodec& codec_;
  const InboundCodec& inbound_;
  InboundOptions options_;
  const ProviderConfig& provider_;
  std::unique_ptr<ChatStreamDecoder> decoder_;
  std::unique_ptr<ChatStreamEncoder> encoder_;
  RequestContext* ctx_ = nullptr;
  std::string out_;
  bool ended_ = false;
};

}  // namespace

std::unique_ptr<ResponseTranslator> makePassThroughTranslator(WireFormat format, bool strip_usage_chunk,
                                                              const ProviderConfig* provider, const UpstreamRequest* request) {
  auto t = std::make_unique<PassThroughTranslator>(format, strip_usage_chunk, provider);
  if (format == WireFormat::Audio && request && !request->body.empty()) t->countCharacters(request->body);
  return t;
}

bool requestStreamUsage(std::string& body) {
  if (body.find("\"stream_options\"") == std::string::npos) {
    // The common case: splice the option in before the closing brace, leaving every
    // other byte as the client sent it.
    auto close = body.find_last_of('}');
    if (close == std::string::npos) return false;
    body.insert(close, ",\"stream_options\":{\"include_usage\":true}");
    return true;
  }
  boost::system::error_code ec;
  bj::value v = readJson(body, ec);
  if (ec || !v.is_object()) return false;
  bj::object& o = v.get_object();
  bj::value& so = o["stream_options"];
  if (!so.is_object()) so = bj::object{};
  if (json::truthy(so.get_object(), "include_usage")) return false;
  so.get_object()["include_usage"] = true;
  body = bj::serialize(o);
  return true;
}

void addCommonHeaders(UpstreamRequest& req, const RequestContext& ctx, const ProviderConfig& provider,
                      std::string_view content_type, std::string_view accept) {
  req.header_lines.reserve(256);
  req.addHeader("Content-Type", content_type);
  req.addHeader("Accept", accept);
  req.addHeader("X-Request-Id", ctx.request_id);
  for (const auto& [name, value] : provider.headers) req.addHeader(name, value);
}

std::string scrubSecrets(std::string text, const ProviderConfig& provider) {
  SecretScrubber(provider).scrubWhole(text);
  return text;
}

std::unique_ptr<ResponseTranslator> TranslatingAdapter::responseTranslator(const RequestContext& ctx,
                                                                           const UpstreamRequest& request,
                                                                           const ProviderRuntime& provider) const {
  if (native(ctx, *provider.config)) return passThroughTranslator(ctx, request, *provider.config);
  const InboundCodec* inbound = inboundFor(ctx.endpoint);
  InboundOptions options;
  options.model = ctx.facts.model;
  options.include_usage = ctx.facts.include_usage;
  if (inbound && ctx.facts.stream) options.estimated_input_tokens = inbound->estimatePromptTokens(ctx.body);
  if (inbound) options.echo = inbound->requestEcho(ctx.body);
  return std::make_unique<TranslatingTranslator>(*codec_, inbound ? *inbound : openAIChatInbound(), std::move(options),
                                                 *provider.config);
}

std::unique_ptr<ResponseTranslator> TranslatingAdapter::passThroughTranslator(const RequestContext&,
                                                                              const UpstreamRequest&,
                                                                              const ProviderConfig& provider) const {
  return makePassThroughTranslator(WireFormat::OpenAIChat, false, &provider);
}

std::string TranslatingAdapter::upstreamPath(const EncodedRequest& encoded, const RequestContext&,
                                             const ProviderRuntime& provider) const {
  return provider.config->base_path + encoded.path;
}

std::string TranslatingAdapter::upstreamModel(const RequestContext& ctx) const {
  return ctx.deployment ? ctx.deployment->upstream_model : ctx.facts.model;
}

std::variant<UpstreamRequest, Error> TranslatingAdapter::translate(RequestContext& ctx, const ProviderRuntime& provider) const {
  const ProviderConfig& p = *provider.config;
  const InboundCodec* inbound = inboundFor(ctx.endpoint);
  if (!inbound)
    return Error{ErrorKind::InvalidRequest, "The " + std::string(ctx.path) + " endpoint is not supported by provider type '" +
                                                p.type + "' (model '" + ctx.facts.model + "')."};
  auto chat = inbound->toChat(ctx.body);
  if (auto* err = std::get_if<Error>(&chat)) return std::move(*err);
  EncodeOptions options;
  options.upstream_model = upstreamModel(ctx);
  options.stream = ctx.facts.stream;
  options.default_max_tokens = p.default_max_tokens;
  options.stream_usage = p.stream_usage;
  auto encoded = codec_->encodeRequest(std::get<bj::object>(chat), options);
  if (auto* err = std::get_if<Error>(&encoded)) return std::move(*err);
  EncodedRequest& e = std::get<EncodedRequest>(encoded);
  UpstreamRequest req;
  req.path = upstreamPath(e, ctx, provider);
  addCommonHeaders(req, ctx, p, e.content_type, e.accept);
  req.body = std::move(e.body);
  req.expect_stream = ctx.facts.stream;
  if (auto err = authorize(req, provider)) return std::move(*err);
  return req;
}

}  // namespace tahua
