#include "filters/access_log/access_log_filter.h"

#include "request/end_reason.h"
#include "telemetry/access_log_entry.h"

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
    using namespace std::chrono;
    // The entry: numbers, flags and copies of the strings; the writer thread formats it.
    AccessLogEntry e;
    AccessLogEntryWriter w;
    e.ts_ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
    e.status = ctx.status;
    e.request_id = w.text(ctx.request_id);
    if (ctx.trace.valid()) {
      e.has_trace = true;
      e.trace_id = ctx.trace.trace_id;
      e.span_id = ctx.trace.span_id;
    }
    e.method = w.text(ctx.method);
    e.path = w.text(ctx.path);
    if (ctx.model) e.model = w.text(ctx.model->name);
    else e.model = w.text(ctx.facts.model);
    e.has_model = ctx.model || !ctx.facts.model.empty();
    if (ctx.provider) {
      e.has_provider = true;
      e.provider = w.text(ctx.provider->name);
    }
    if (ctx.deployment) {
      e.has_deployment = true;
      e.deployment = w.text(ctx.deployment->id);
      e.version = w.text(ctx.deployment->version);
      e.upstream_address = w.text(ctx.deployment->address);
    }
    e.route = w.text(ctx.route_reason);
    e.route_name = w.text(ctx.route_name);
    if (ctx.principal.tenant) {
      e.has_tenant = true;
      e.tenant = w.text(ctx.principal.tenant->name);
    }
    if (ctx.principal.key) {
      e.has_key = true;
      e.key = w.text(ctx.principal.key->name);
      e.key_prefix = w.text(ctx.principal.key->prefix);
    }
    if (!ctx.fallback.empty()) {
      e.fallback = w.text(ctx.fallback);
      if (ctx.requested_model) {
        e.has_requested_model = true;
        e.requested_model = w.text(ctx.requested_model->name);
      }
    }
    for (std::size_t i = 0; i < kRecordFieldCount; ++i)
      if (!ctx.record_fields[i].empty()) {
        e.record_fields |= static_cast<std::uint16_t>(1u << i);
        e.record_field[i] = w.text(ctx.record_fields[i]);
      }
    e.streaming = ctx.streaming;
    e.bytes_in = ctx.bytes_in;
    e.bytes_out = ctx.bytes_out;
    e.chunks = ctx.chunks_out;
    e.duration_ns = duration_cast<nanoseconds>(ctx.end - ctx.start).count();
    if (ctx.first_byte) {
      e.has_ttft = true;
      e.ttft_ns = duration_cast<nanoseconds>(*ctx.first_byte - ctx.start).count();
    }
    e.prompt_tokens = ctx.usage.prompt_tokens;
    e.completion_tokens = ctx.usage.completion_tokens;
    e.total_tokens = ctx.usage.total_tokens;
    e.cached_tokens = ctx.usage.cached_tokens;
    e.images = ctx.usage.images;
    e.audio_seconds = ctx.usage.audio_seconds;
    e.characters = ctx.usage.characters;
    e.cost_usd = costUsd(ctx.model, ctx.usage);
    e.api = apiName(ctx.endpoint);
    if (ctx.error) {
      e.has_error = true;
      e.error = w.text(ctx.error->code());
      if (ctx.error->timeout_kind) e.timeout = std::string_view(ctx.error->timeout_kind);
    }
    e.end_reason = endReason(ctx);
    e.attempts = ctx.attempts;
    w.write(sink_.entries(), e);
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
