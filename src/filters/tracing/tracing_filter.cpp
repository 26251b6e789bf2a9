#include "filters/tracing/tracing_filter.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "request/end_reason.h"
#include "telemetry/otlp_spans.h"
#include "telemetry/span_record.h"
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

constexpr std::size_t kMaxModelName = 256;

// Per request, in the chain's state block. A request that is not sampled uses the ids
// and the attempts (a failed request is exported whatever the decision); the response
// model and the captured text are kept for sampled requests only.
struct TracingState {
  TracingState() {}  // the model name's bytes are not zeroed first
  std::array<Attempt, kMaxAttempts> attempts;
  std::size_t count = 0;           // attempts made, kept or not
  std::string prompt, completion;  // sampled, with capture_content only
  std::size_t model_scanned = 0;   // stream bytes looked at for the response model
  std::size_t response_model_size = 0;
  char response_model[kMaxModelName];  // the model the answer names (gen_ai.response.model)

  std::string_view responseModel() const { return {response_model, response_model_size}; }
  void setResponseModel(std::string_view m) {
    std::memcpy(response_model, m.data(), m.size());  // at most kMaxModelName (answerModel)
    response_model_size = m.size();
  }
};

constexpr std::size_t kModelScanBytes = 16 * 1024;  // an answer names its model in its first event

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

std::int64_t unixNanos(SteadyTime t) {
  return unixNanosFromSteady(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
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
    TraceContext& t = ctx.trace;
    // Continued: the caller's sampling decision stands (its tracestate goes on, read
    // from the request's headers at each attempt).
    if (!ctx.headers || !parseTraceparent(ctx.headers->get("traceparent"), t)) {
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
    if (capture_ && ctx.trace.sampled) state(ctx).prompt.assign(ctx.body.data(), std::min(ctx.body.size(), kMaxContentBytes));
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
    if (ctx.headers && !isZero(ctx.trace.parent_id)) {
      const std::string_view ts = ctx.headers->get("tracestate");
      if (tracestatePassable(ts)) headers.add("tracestate", ts);
    }
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
    if (!ctx.trace.sampled) return;
    TracingState& st = state(ctx);
    if (st.response_model_size == 0 && st.model_scanned < kModelScanBytes) {
      // A key cut between two pieces is missed; the next event names the model again.
      st.setResponseModel(answerModel(data.bytes()));
      st.model_scanned += data.bytes().size();
    }
    if (!capture_) return;
    std::string& c = st.completion;
    if (c.size() < kMaxContentBytes) c.append(data.bytes().substr(0, kMaxContentBytes - c.size()));
  }
  void onResponseBody(RequestContext& ctx, std::string& body) override {
    if (!ctx.trace.sampled) return;
    TracingState& st = state(ctx);
    if (ctx.status >= 200 && ctx.status < 300) st.setResponseModel(answerModel(std::string_view(body).substr(0, kModelScanBytes)));
    if (capture_) st.completion.assign(body.data(), std::min(body.size(), kMaxContentBytes));
  }

  void onComplete(RequestContext& ctx) override {
    TracingState& st = state(ctx);
    if (!ctx.trace.valid()) return;
    if (Attempt* a = current(st)) close(*a, ctx, ctx.end);
    // Exported when sampled, and always when the gateway or an upstream failed.
    const bool failed = ctx.status >= 500 || (ctx.error && ctx.error->source() != ErrorSource::Client);
    if (!ctx.trace.sampled && !failed) return;
    writeRecord(ctx, st, failed);
  }

 private:
  static bool isZero(const std::array<std::uint8_t, 8>& id) {
    std::uint64_t v;
    std::memcpy(&v, id.data(), 8);
    return v == 0;
  }

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

  // The request's spans as one record for the exporter (span_record.h): numbers and
  // copies of the strings, nothing encoded here.
  void writeRecord(const RequestContext& ctx, const TracingState& st, bool failed) const {
    const std::size_t kept = std::min(st.count, kMaxAttempts);
    SpanRecordWriter w(kept);
    ServerSpan s;
    s.kept = static_cast<std::uint8_t>(kept);
    s.continued = !isZero(ctx.trace.parent_id);
    s.failed = failed;
    s.streaming = ctx.streaming;
    s.trace_id = ctx.trace.trace_id;
    s.span_id = ctx.trace.span_id;
    s.parent_id = ctx.trace.parent_id;
    s.start_ns = unixNanos(ctx.start);
    s.end_ns = unixNanos(ctx.end);
    if (ctx.first_byte) s.first_byte_ns = unixNanos(*ctx.first_byte);
    s.status = ctx.status;
    s.attempts = static_cast<std::int32_t>(st.count);
    s.max_tokens = ctx.facts.max_tokens;
    s.temperature = ctx.facts.temperature;
    s.prompt_tokens = ctx.usage.prompt_tokens;
    s.completion_tokens = ctx.usage.completion_tokens;
    if (ctx.usage.finish != FinishReason::None) s.finish_reason = finishReasonName(ctx.usage.finish);
    s.operation = operationName(ctx.endpoint);
    s.end_reason = endReason(ctx);
    if (ctx.error) s.error = ctx.error->code();
    s.method = w.text(ctx.method);
    s.path = w.text(ctx.path);
    s.request_id = w.text(ctx.request_id);
    s.has_endpoint = ctx.endpoint != Endpoint::None;
    if (s.has_endpoint) {
      s.request_model = w.text(ctx.facts.model);
      if (ctx.provider) s.provider_type = w.text(ctx.provider->type);
    }
    s.response_model = w.text(st.responseModel());
    if (ctx.model) s.model = w.text(ctx.model->name);
    s.route = w.text(ctx.route_name);
    s.route_reason = w.text(ctx.route_reason);
    if (ctx.deployment) {
      s.deployment_id = w.text(ctx.deployment->id);
      s.deployment_version = w.text(ctx.deployment->version);
    }
    if (ctx.principal.tenant) s.tenant = w.text(ctx.principal.tenant->name);
    if (ctx.principal.key) s.key = w.text(ctx.principal.key->name);
    s.fallback = w.text(ctx.fallback);
    if (capture_ && ctx.trace.sampled) {
      s.capture = true;
      s.input = w.text(st.prompt);
      s.output = w.text(st.completion);
    }
    std::array<AttemptSpan, kMaxAttempts> attempts;
    for (std::size_t i = 0; i < kept; ++i) {
      const Attempt& a = st.attempts[i];
      AttemptSpan& o = attempts[i];
      o.span_id = a.span;
      o.start_ns = unixNanos(a.start);
      o.end_ns = unixNanos(a.ended ? a.end : ctx.end);
      if (a.first_byte != SteadyTime{}) o.first_byte_ns = unixNanos(a.first_byte);
      o.status = a.status;
      o.error = a.error;
      if (a.provider) {
        o.has_provider = true;
        o.provider_type = w.text(a.provider->type);
        o.provider_host = w.text(a.provider->host);
        o.provider_name = w.text(a.provider->name);
        o.port = a.provider->port;
      }
      if (a.deployment) {
        o.has_deployment = true;
        o.upstream_model = w.text(a.deployment->upstream_model);
        o.deployment_id = w.text(a.deployment->id);
        o.deployment_version = w.text(a.deployment->version);
      }
    }
    // The attempt whose answer reached the client: the last, when it did not fail.
    if (kept == st.count && kept > 0 && !ctx.error) {
      const Attempt& last = st.attempts[kept - 1];
      s.answered = last.error.empty() && last.status >= 200 && last.status < 300;
    }
    w.write(spans_.data(), s, attempts.data());
    spans_.commit(spanCount(s));
  }

  bool capture_;
  std::uint64_t threshold_;
  ExportBuffer& spans_;
};

}  // namespace

std::unique_ptr<Filter> makeTracingFilter(const Config& config, ExportBuffer& spans) {
  return std::make_unique<TracingFilter>(config.tracing, spans);
}

}  // namespace tahua
