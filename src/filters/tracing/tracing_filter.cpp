#include "filters/tracing/tracing_filter.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <optional>

#include "request/end_reason.h"
#include "telemetry/json_out.h"
#include "telemetry/trace_context.h"

namespace tahua {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxAttempts = 8;           // attempt spans kept per request (more: counted only)
constexpr std::size_t kMaxContentBytes = 16384;   // captured prompt / completion text, each

struct Attempt {
  std::array<std::uint8_t, 8> span{};
  SteadyTime start{}, first_byte{}, end{};
  const DeploymentConfig* deployment = nullptr;
  const ProviderConfig* provider = nullptr;
  int status = 0;
  std::string_view error;  // the error's code (a literal), empty when none
  bool ended = false;
};

struct TracingState {
  std::string tracestate;
  std::array<Attempt, kMaxAttempts> attempts;
  std::size_t count = 0;  // attempts made, kept or not
  std::string prompt, completion;  // with capture_content only
  std::string response_model;      // the model the answer names (gen_ai.response.model)
  std::size_t model_scanned = 0;   // stream bytes looked at for it
};

constexpr std::size_t kModelScanBytes = 16 * 1024;  // an answer names its model in its first event
constexpr std::size_t kMaxModelName = 256;

// The value of the first `"model":"..."` in a piece of the client's answer (every API
// tahua answers in names it near the start: OpenAI's chunks and bodies, Anthropic's
// message_start, Responses' response object), or empty. Inside a JSON string a quote is
// escaped, so only a key matches.
std::string_view answerModel(std::string_view json) {
  constexpr std::string_view key = "\"model\"";
  for (std::size_t at = json.find(key); at != std::string_view::npos; at = json.find(key, at + 1)) {
    std::size_t i = at + key.size();
    while (i < json.size() && (json[i] == ' ' || json[i] == '\t' || json[i] == '\n' || json[i] == '\r')) ++i;
    if (i >= json.size() || json[i] != ':') continue;
    ++i;
    while (i < json.size() && (json[i] == ' ' || json[i] == '\t' || json[i] == '\n' || json[i] == '\r')) ++i;
    if (i >= json.size() || json[i] != '"') continue;
    const std::size_t begin = i + 1;
    const std::size_t end = json.find_first_of("\"\\", begin);
    if (end == std::string_view::npos || json[end] != '"' || end - begin > kMaxModelName || end == begin) return {};
    return json.substr(begin, end - begin);
  }
  return {};
}

// Steady-clock instants as Unix nanoseconds (one offset for the process).
std::int64_t unixNanos(SteadyTime t) {
  static const std::int64_t offset =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count() -
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() + offset;
}

std::string_view operationName(Endpoint e) {
  switch (e) {
    case Endpoint::Completions: return "text_completion";
    case Endpoint::Embeddings: return "embeddings";
    case Endpoint::Moderations: return "moderations";
    case Endpoint::ImagesGenerations: return "image_generation";
    case Endpoint::Rerank: return "rerank";
    case Endpoint::AudioTranscriptions: return "transcription";
    case Endpoint::AudioTranslations: return "translation";
    case Endpoint::AudioSpeech: return "speech";
    case Endpoint::ImagesEdits: return "image_edit";
    case Endpoint::Files:
    case Endpoint::FileObject:
    case Endpoint::FileContent: return "files";
    case Endpoint::Batches:
    case Endpoint::BatchObject:
    case Endpoint::BatchCancel: return "batches";
    case Endpoint::Realtime: return "realtime";
    case Endpoint::Mcp: return "mcp";
    default: return "chat";
  }
}

// Appending OTLP JSON: attributes are {"key":k,"value":{"<type>Value":v}}; 64-bit
// integers and nanosecond times are strings in OTLP's JSON mapping.
class SpanWriter {
 public:
  explicit SpanWriter(JsonBuf& out) : out_(out) {}

  // The span's name is `name` and, when given, ' ' and `name2` (no string built for it).
  void begin(const TraceContext& t, const std::array<std::uint8_t, 8>& span, const std::array<std::uint8_t, 8>* parent,
             std::string_view name, std::string_view name2, int kind, SteadyTime start, SteadyTime end) {
    char hex[32];
    out_.raw(std::string_view("{\"traceId\":\""));
    toHex(t.trace_id.data(), 16, hex);
    out_.raw(hex, 32);
    out_.raw(std::string_view("\",\"spanId\":\""));
    toHex(span.data(), 8, hex);
    out_.raw(hex, 16);
    out_.push_back('"');
    if (parent) {
      out_.raw(std::string_view(",\"parentSpanId\":\""));
      toHex(parent->data(), 8, hex);
      out_.raw(hex, 16);
      out_.push_back('"');
    }
    out_.raw(std::string_view(",\"name\":"));
    out_.push_back('"');
    json_out::escaped(out_, name);
    if (!name2.empty()) {
      out_.push_back(' ');
      json_out::escaped(out_, name2);
    }
    out_.push_back('"');
    out_.raw(std::string_view(",\"kind\":"));
    json_out::integer(out_, kind);
    out_.raw(std::string_view(",\"startTimeUnixNano\":\""));
    json_out::integer(out_, unixNanos(start));
    out_.raw(std::string_view("\",\"endTimeUnixNano\":\""));
    json_out::integer(out_, unixNanos(end));
    out_.raw(std::string_view("\",\"attributes\":["));
    first_ = true;
  }
  void str(std::string_view key, std::string_view value) {
    open(key);
    out_.raw(std::string_view("{\"stringValue\":"));
    json_out::string(out_, value);
    out_.raw(std::string_view("}}"));
  }
  void integer(std::string_view key, std::int64_t value) {
    open(key);
    out_.raw(std::string_view("{\"intValue\":\""));
    json_out::integer(out_, value);
    out_.raw(std::string_view("\"}}"));
  }
  // A string array of one value (gen_ai.response.finish_reasons).
  void strList(std::string_view key, std::string_view value) {
    open(key);
    out_.raw(std::string_view("{\"arrayValue\":{\"values\":[{\"stringValue\":"));
    json_out::string(out_, value);
    out_.raw(std::string_view("}]}}}"));
  }
  void dbl(std::string_view key, double value) {
    open(key);
    out_.raw(std::string_view("{\"doubleValue\":"));
    json_out::number(out_, value);
    out_.raw(std::string_view("}}"));
  }
  void boolean(std::string_view key, bool value) {
    open(key);
    out_.raw(value ? std::string_view("{\"boolValue\":true}}") : std::string_view("{\"boolValue\":false}}"));
  }
  // Closes the attributes; an event list (at most one event here) and the status follow.
  void end(std::optional<std::pair<std::string_view, SteadyTime>> event, bool error, std::string_view message) {
    out_.push_back(']');
    if (event) {
      out_.raw(std::string_view(",\"events\":[{\"name\":"));
      json_out::string(out_, event->first);
      out_.raw(std::string_view(",\"timeUnixNano\":\""));
      json_out::integer(out_, unixNanos(event->second));
      out_.raw(std::string_view("\"}]"));
    }
    if (error) {
      out_.raw(std::string_view(",\"status\":{\"code\":2,\"message\":"));
      json_out::string(out_, message);
      out_.raw(std::string_view("}}"));
    } else {
      out_.raw(std::string_view(",\"status\":{\"code\":0}}"));
    }
  }

 private:
  void open(std::string_view key) {
    // Keys are literals without characters to escape.
    if (first_) out_.raw("{\"key\":\"", 8);
    else out_.raw(",{\"key\":\"", 9);
    first_ = false;
    out_.raw(key.data(), key.size());
    out_.raw("\",\"value\":", 10);
  }
  JsonBuf& out_;
  bool first_ = true;
};

class TracingFilter final : public FilterWithState<TracingState> {
 public:
  TracingFilter(const TracingConfig& config, ExportBuffer& spans)
      : capture_(config.capture_content),
        threshold_(config.sample_ratio >= 1 ? ~std::uint64_t{0}
                                            : static_cast<std::uint64_t>(config.sample_ratio * 18446744073709551615.0)),
        spans_(spans) {}
  std::string_view name() const override { return "tracing"; }
  // Every stream: its first events name the model that answered (then one compare a piece).
  bool wantsResponseData() const override { return true; }

  FilterStatus onRequestHeaders(RequestContext& ctx) override {
    TracingState& st = state(ctx);
    TraceContext& t = ctx.trace;
    if (ctx.headers && parseTraceparent(ctx.headers->get("traceparent"), t)) {
      // Continued: the caller's sampling decision stands; its vendors' state goes on.
      std::string_view ts = ctx.headers->get("tracestate");
      if (tracestatePassable(ts)) st.tracestate.assign(ts);
    } else {
      t = TraceContext{};
      randomBytes(t.trace_id.data(), t.trace_id.size());
      std::uint64_t low;
      std::memcpy(&low, t.trace_id.data() + 8, 8);
      t.sampled = threshold_ == ~std::uint64_t{0} || low < threshold_;
    }
    randomBytes(t.span_id.data(), t.span_id.size());
    return FilterStatus::Continue;
  }

  FilterStatus onRequestBody(RequestContext& ctx) override {
    if (capture_) state(ctx).prompt.assign(ctx.body.data(), std::min(ctx.body.size(), kMaxContentBytes));
    return FilterStatus::Continue;
  }

  void onUpstreamRequest(RequestContext& ctx, UpstreamRequestHeaders& headers) override {
    TracingState& st = state(ctx);
    std::array<std::uint8_t, 8> span;
    randomBytes(span.data(), span.size());
    if (st.count < kMaxAttempts) {
      Attempt& a = st.attempts[st.count];
      a = Attempt{};
      a.span = span;
      a.start = Clock::now();
      a.deployment = ctx.deployment;
      a.provider = ctx.provider;
    }
    ++st.count;
    char header[55];
    formatTraceparent(ctx.trace, span, header);
    headers.add("traceparent", std::string_view(header, sizeof header));
    if (!st.tracestate.empty()) headers.add("tracestate", st.tracestate);
  }

  void onUpstreamHeaders(const RequestContext& ctx) override {
    // The hook is read-only for the request; this filter's own State is its to write.
    const TracingState& st = state(ctx);
    if (Attempt* a = current(const_cast<TracingState&>(st))) {
      a->first_byte = Clock::now();
      a->status = ctx.status;
    }
  }

  void onAttemptFailed(RequestContext& ctx) override {
    if (Attempt* a = current(state(ctx))) close(*a, ctx, Clock::now());
  }

  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    TracingState& st = state(ctx);
    if (st.response_model.empty() && st.model_scanned < kModelScanBytes) {
      // A key cut between two pieces is missed; the next event names the model again.
      st.response_model.assign(answerModel(data.bytes()));
      st.model_scanned += data.bytes().size();
    }
    if (!capture_) return;
    std::string& c = st.completion;
    if (c.size() < kMaxContentBytes) c.append(data.bytes().substr(0, kMaxContentBytes - c.size()));
  }
  void onResponseBody(RequestContext& ctx, std::string& body) override {
    TracingState& st = state(ctx);
    if (ctx.status >= 200 && ctx.status < 300) st.response_model.assign(answerModel(std::string_view(body).substr(0, kModelScanBytes)));
    if (capture_) st.completion.assign(body.data(), std::min(body.size(), kMaxContentBytes));
  }

  void onComplete(RequestContext& ctx) override {
    TracingState& st = state(ctx);
    if (!ctx.trace.valid()) return;
    if (Attempt* a = current(st)) close(*a, ctx, ctx.end);
    // Exported when sampled, and always when the gateway or an upstream failed.
    const bool failed = ctx.status >= 500 || (ctx.error && ctx.error->source() != ErrorSource::Client);
    if (!ctx.trace.sampled && !failed) return;
    JsonBuf& out = spans_.data();
    writeServerSpan(out, ctx, st, failed);
    spans_.commit();
    for (std::size_t i = 0; i < std::min(st.count, kMaxAttempts); ++i) {
      writeAttemptSpan(out, ctx, st, st.attempts[i]);
      spans_.commit();
    }
  }

 private:
  static Attempt* current(TracingState& st) {
    if (st.count == 0 || st.count > kMaxAttempts) return nullptr;
    Attempt& a = st.attempts[st.count - 1];
    return a.ended ? nullptr : &a;
  }

  static void close(Attempt& a, const RequestContext& ctx, SteadyTime at) {
    a.end = at;
    a.ended = true;
    if (ctx.status) a.status = ctx.status;
    if (ctx.error) a.error = ctx.error->code();
  }

  void common(SpanWriter& w, const RequestContext& ctx) const {
    w.str("gen_ai.operation.name", operationName(ctx.endpoint));
    if (!ctx.facts.model.empty()) w.str("gen_ai.request.model", ctx.facts.model);
    if (ctx.provider) w.str("gen_ai.provider.name", genAiProviderName(ctx.provider->type));
  }

  void writeServerSpan(JsonBuf& out, const RequestContext& ctx, const TracingState& st, bool failed) const {
    SpanWriter w(out);
    const bool continued = std::any_of(ctx.trace.parent_id.begin(), ctx.trace.parent_id.end(), [](auto b) { return b != 0; });
    w.begin(ctx.trace, ctx.trace.span_id, continued ? &ctx.trace.parent_id : nullptr, ctx.method, ctx.path, 2, ctx.start, ctx.end);
    w.str("http.request.method", ctx.method);
    w.str("url.path", ctx.path);
    w.integer("http.response.status_code", ctx.status);
    w.str("tahua.request_id", ctx.request_id);
    if (ctx.endpoint != Endpoint::None) common(w, ctx);
    if (!st.response_model.empty()) w.str("gen_ai.response.model", st.response_model);
    if (ctx.facts.max_tokens > 0) w.integer("gen_ai.request.max_tokens", ctx.facts.max_tokens);
    if (ctx.facts.temperature >= 0) w.dbl("gen_ai.request.temperature", ctx.facts.temperature);
    if (ctx.usage.prompt_tokens >= 0) w.integer("gen_ai.usage.input_tokens", ctx.usage.prompt_tokens);
    if (ctx.usage.completion_tokens >= 0) w.integer("gen_ai.usage.output_tokens", ctx.usage.completion_tokens);
    if (ctx.usage.finish != FinishReason::None) w.strList("gen_ai.response.finish_reasons", finishReasonName(ctx.usage.finish));
    if (ctx.first_byte)
      w.dbl("gen_ai.server.time_to_first_token", std::chrono::duration<double>(*ctx.first_byte - ctx.start).count());
    w.boolean("tahua.stream", ctx.streaming);
    if (ctx.model) w.str("tahua.model", ctx.model->name);
    if (!ctx.route_name.empty()) w.str("tahua.route", ctx.route_name);
    if (!ctx.route_reason.empty()) w.str("tahua.route_reason", ctx.route_reason);
    if (ctx.deployment) {
      w.str("tahua.deployment", ctx.deployment->id);
      w.str("tahua.version", ctx.deployment->version);
    }
    if (ctx.principal.tenant) w.str("tahua.tenant", ctx.principal.tenant->name);
    if (ctx.principal.key) w.str("tahua.key", ctx.principal.key->name);
    if (!ctx.fallback.empty()) w.str("tahua.fallback", ctx.fallback);
    w.integer("tahua.attempts", static_cast<std::int64_t>(st.count));
    w.str("tahua.end_reason", endReason(ctx));
    if (ctx.error) w.str("error.type", ctx.error->code());
    if (capture_) {
      w.str("gen_ai.input.messages", st.prompt);
      w.str("gen_ai.output.messages", st.completion);
    }
    std::optional<std::pair<std::string_view, SteadyTime>> first;
    if (ctx.first_byte) first.emplace("gen_ai.first_token", *ctx.first_byte);
    char status[16] = "HTTP ";
    std::string_view message;
    if (ctx.error) message = ctx.error->code();
    else if (failed) message = std::string_view(status, static_cast<std::size_t>(std::to_chars(status + 5, status + sizeof status, ctx.status).ptr - status));
    w.end(first, failed, message);
  }

  // The attempt whose answer reached the client: the last, when it did not fail.
  static const Attempt* answering(const RequestContext& ctx, const TracingState& st) {
    if (st.count == 0 || st.count > kMaxAttempts || ctx.error) return nullptr;
    const Attempt& last = st.attempts[st.count - 1];
    return last.error.empty() && last.status >= 200 && last.status < 300 ? &last : nullptr;
  }

  void writeAttemptSpan(JsonBuf& out, const RequestContext& ctx, const TracingState& st, const Attempt& a) const {
    SpanWriter w(out);
    w.begin(ctx.trace, a.span, &ctx.trace.span_id, operationName(ctx.endpoint),
            a.deployment ? std::string_view(a.deployment->upstream_model) : std::string_view{}, 3, a.start, a.ended ? a.end : ctx.end);
    w.str("gen_ai.operation.name", operationName(ctx.endpoint));
    if (a.provider) {
      w.str("gen_ai.provider.name", genAiProviderName(a.provider->type));
      w.str("server.address", a.provider->host);
      w.integer("server.port", a.provider->port);
      w.str("tahua.provider", a.provider->name);
    }
    if (a.deployment) {
      w.str("gen_ai.request.model", a.deployment->upstream_model);
      w.str("tahua.deployment", a.deployment->id);
      w.str("tahua.version", a.deployment->version);
    }
    if (a.status) w.integer("http.response.status_code", a.status);
    // The attempt that answered the client: the model its answer named, and its tokens
    // (earlier attempts failed before any answer; per attempt is what fallback billing reads).
    if (&a == answering(ctx, st)) {
      if (!st.response_model.empty()) w.str("gen_ai.response.model", st.response_model);
      if (ctx.usage.prompt_tokens >= 0) w.integer("gen_ai.usage.input_tokens", ctx.usage.prompt_tokens);
      if (ctx.usage.completion_tokens >= 0) w.integer("gen_ai.usage.output_tokens", ctx.usage.completion_tokens);
    }
    if (!a.error.empty()) w.str("error.type", a.error);
    const bool failed = !a.error.empty() || a.status >= 500 || a.status == 429;
    std::optional<std::pair<std::string_view, SteadyTime>> first;
    if (a.first_byte != SteadyTime{}) first.emplace("tahua.response_headers", a.first_byte);
    w.end(first, failed, !a.error.empty() ? a.error : std::string_view("upstream failed"));
  }

  bool capture_;
  std::uint64_t threshold_;
  ExportBuffer& spans_;
};

}  // namespace

std::string_view genAiProviderName(std::string_view type) {
  if (type == "azure") return "azure.ai.openai";
  if (type == "gemini") return "gcp.gemini";
  if (type == "vertex") return "gcp.vertex_ai";
  if (type == "bedrock") return "aws.bedrock";
  return type;  // openai, anthropic, and the rest by their type name
}

std::unique_ptr<Filter> makeTracingFilter(const Config& config, ExportBuffer& spans) {
  return std::make_unique<TracingFilter>(config.tracing, spans);
}

}  // namespace tahua
