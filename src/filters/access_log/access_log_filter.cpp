#include "filters/access_log/access_log_filter.h"

#include "request/end_reason.h"
#include "telemetry/json_out.h"

namespace tahua {
namespace {

class AccessLogFilter final : public Filter {
 public:
  AccessLogFilter(AccessLogSink& sink, double sample) : sink_(sink), sample_(sample) {}
  std::string_view name() const override { return "access_log"; }

  void onComplete(RequestContext& ctx) override {
    if (ctx.status < 400 && sample_ < 1) {
      credit_ += sample_;
      if (credit_ < 1) return;
      credit_ -= 1;
    }
    namespace j = json_out;
    using namespace std::chrono;
    JsonBuf& out = sink_.line();
    out.raw(std::string_view("{\"ts\":"));
    j::time(out, system_clock::now());
    j::key(out, "level");
    j::string(out, ctx.status >= 500 ? "error" : ctx.status >= 400 ? "warn" : "info");
    j::key(out, "request_id");
    j::string(out, ctx.request_id);
    if (ctx.trace.valid()) {
      char hex[32];
      ctx.trace.traceIdHex(hex);
      j::key(out, "trace_id");
      j::string(out, std::string_view(hex, 32));
      ctx.trace.spanIdHex(hex);
      j::key(out, "span_id");
      j::string(out, std::string_view(hex, 16));
    }
    j::key(out, "method");
    j::string(out, ctx.method);
    j::key(out, "path");
    j::string(out, ctx.path);
    auto strOrNull = [&](std::string_view k, const std::string* v) {
      j::key(out, k);
      if (v) j::string(out, *v);
      else out.raw(std::string_view("null"));
    };
    j::key(out, "model");
    if (ctx.model) j::string(out, ctx.model->name);
    else if (!ctx.facts.model.empty()) j::string(out, ctx.facts.model);
    else out.raw(std::string_view("null"));
    strOrNull("provider", ctx.provider ? &ctx.provider->name : nullptr);
    strOrNull("deployment", ctx.deployment ? &ctx.deployment->id : nullptr);
    strOrNull("version", ctx.deployment ? &ctx.deployment->version : nullptr);
    if (ctx.deployment && !ctx.deployment->address.empty()) strOrNull("upstream_address", &ctx.deployment->address);
    if (!ctx.route_reason.empty()) {
      j::key(out, "route");
      j::string(out, ctx.route_reason);
    }
    if (!ctx.route_name.empty()) {
      j::key(out, "route_name");
      j::string(out, ctx.route_name);
    }
    // Who called: the tenant, the key's name and its display prefix (never the key).
    if (ctx.principal.tenant) strOrNull("tenant", &ctx.principal.tenant->name);
    if (ctx.principal.key) {
      strOrNull("key", &ctx.principal.key->name);
      if (!ctx.principal.key->prefix.empty()) strOrNull("key_prefix", &ctx.principal.key->prefix);
    }
    if (!ctx.fallback.empty()) {
      j::key(out, "fallback");
      j::string(out, ctx.fallback);
      if (ctx.requested_model) strOrNull("requested_model", &ctx.requested_model->name);
    }
    for (std::size_t i = 0; i < ctx.record_fields.size(); ++i)
      if (!ctx.record_fields[i].empty()) {
        j::key(out, recordFieldName(static_cast<RecordField>(i)));
        if (recordFieldNumeric(static_cast<RecordField>(i))) out.raw(ctx.record_fields[i]);
        else j::string(out, ctx.record_fields[i]);
      }
    j::key(out, "status");
    j::integer(out, ctx.status);
    j::key(out, "stream");
    out.raw(ctx.streaming ? std::string_view("true") : std::string_view("false"));
    j::key(out, "bytes_in");
    j::integer(out, static_cast<std::int64_t>(ctx.bytes_in));
    j::key(out, "bytes_out");
    j::integer(out, static_cast<std::int64_t>(ctx.bytes_out));
    j::key(out, "duration_ms");
    j::millis(out, ctx.end - ctx.start);
    j::key(out, "ttft_ms");
    if (ctx.first_byte) j::millis(out, *ctx.first_byte - ctx.start);
    else out.raw(std::string_view("null"));
    auto tokens = [&](std::string_view k, std::int64_t v) {
      j::key(out, k);
      if (v >= 0) j::integer(out, v);
      else out.raw(std::string_view("null"));
    };
    tokens("prompt_tokens", ctx.usage.prompt_tokens);
    tokens("completion_tokens", ctx.usage.completion_tokens);
    tokens("total_tokens", ctx.usage.total_tokens);
    tokens("cached_tokens", ctx.usage.cached_tokens);
    // Units priced besides tokens, on the lines of the endpoints that have them.
    if (ctx.usage.images >= 0) tokens("images", ctx.usage.images);
    if (ctx.usage.audio_seconds >= 0) {
      j::key(out, "audio_seconds");
      j::number(out, ctx.usage.audio_seconds);
    }
    if (ctx.usage.characters >= 0) tokens("characters", ctx.usage.characters);
    const double cost = costUsd(ctx.model, ctx.usage);
    j::key(out, "cost_usd");
    if (cost >= 0) j::number(out, cost);
    else out.raw(std::string_view("null"));
    j::key(out, "api");
    j::string(out, apiName(ctx.endpoint));
    j::key(out, "error");
    if (ctx.error) j::string(out, ctx.error->code());
    else out.raw(std::string_view("null"));
    if (ctx.error && ctx.error->timeout_kind) {
      j::key(out, "timeout");
      j::string(out, ctx.error->timeout_kind);
    }
    j::key(out, "end_reason");
    j::string(out, endReason(ctx));
    if (ctx.streaming) {
      j::key(out, "chunks");
      j::integer(out, static_cast<std::int64_t>(ctx.chunks_out));
    }
    if (ctx.attempts > 1) {
      j::key(out, "attempts");
      j::integer(out, ctx.attempts);
    }
    out.push_back('}');
    sink_.commit();
  }

 private:
  AccessLogSink& sink_;
  double sample_;
  double credit_ = 0;  // every 1/sample-th successful line: lines 4, 8, ... at 0.25
};

}  // namespace

std::unique_ptr<Filter> makeAccessLogFilter(AccessLogSink& sink, const AccessLogConfig& config) {
  return std::make_unique<AccessLogFilter>(sink, config.sample_success);
}

}  // namespace tahua
