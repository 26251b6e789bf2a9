#include "filters/usage/usage_filter.h"

#include "filters/usage/pending_records.h"
#include "request/end_reason.h"
#include "telemetry/trace_context.h"
#include "telemetry/usage_record.h"
#include "tokens/token_estimator.h"

namespace tahua {
namespace {

struct UsageState {
  std::int64_t delivered = 0;  // completion tokens the client received (estimated on the way)
  bool usage_estimated = false;
  Usage refused;  // answers refused before they were sent (their own records are written)
};

void add(Usage& to, const Usage& u) {
  auto plus = [](std::int64_t& a, std::int64_t b) {
    if (b >= 0) a = std::max<std::int64_t>(a, 0) + b;
  };
  plus(to.prompt_tokens, u.prompt_tokens);
  plus(to.completion_tokens, u.completion_tokens);
  plus(to.total_tokens, u.total_tokens);
  plus(to.cached_tokens, u.cached_tokens);
}

class UsageFilter final : public FilterWithState<UsageState> {
 public:
  UsageFilter(const Config& config, ExportBuffer& records, PendingRecords* pending)
      : records_(records), pending_(pending), gateway_(config.usage.gateway_id) {}
  std::string_view name() const override { return "usage"; }
  bool wantsResponseData() const override { return true; }

  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    // The usage report comes last, so every piece is counted (one pass of the
    // estimator over the piece, no allocation).
    if (!data.aborted() && !audioEndpoint(ctx.endpoint) && !fileEndpoint(ctx.endpoint) && !mcpEndpoint(ctx.endpoint)) state(ctx).delivered += estimateStreamedTokens(data.bytes(), defaultTokenCounter());
  }

  void onResponseBody(RequestContext& ctx, std::string& body) override {
    if (!ctx.usage.present()) state(ctx).delivered = estimateStreamedTokens(body, defaultTokenCounter());
  }

  // A judged answer (onAnswer runs before the answer's body filters): what it would have
  // delivered, in case it is refused without a usage report.
  FilterStatus onAnswer(RequestContext& ctx) override {
    if (!ctx.usage.present()) state(ctx).delivered = estimateStreamedTokens(*ctx.answer, defaultTokenCounter());
    return FilterStatus::Continue;
  }

  // An answer received whole and refused by a filter (its status 2xx, an error of the
  // gateway's): a call whose tokens were spent. It gets its record now.
  void onAttemptFailed(RequestContext& ctx) override {
    if (!(ctx.status >= 200 && ctx.status < 300) || !ctx.error || ctx.error->source() != ErrorSource::Gateway) return;
    UsageState& st = state(ctx);
    if (!ctx.usage.present()) {
      ctx.usage.prompt_tokens = static_cast<std::int64_t>((ctx.bytes_in + 3) / 4);
      ctx.usage.completion_tokens = st.delivered;
      ctx.usage.total_tokens = ctx.usage.prompt_tokens + st.delivered;
      st.usage_estimated = true;
    }
    if (records_.enabled() && !unauthenticated(ctx)) {
      ctx.end = std::chrono::steady_clock::now();
      record(ctx, st);
    }
    add(st.refused, ctx.usage);
    ctx.usage = Usage{};
    st.delivered = 0;
    st.usage_estimated = false;
  }

  void onComplete(RequestContext& ctx) override {
    UsageState& st = state(ctx);
    settle(ctx, st);
    if (records_.enabled() && !unauthenticated(ctx)) record(ctx, st);
    // The limits (calibrated after this) and the metrics count the refused answers too.
    if (st.refused.present()) add(ctx.usage, st.refused);
  }

 private:
  // No record: a request refused for its key (no one to bill), and one the routing
  // refused before any API ran (an unknown URL, a wrong method): it called nothing, and
  // anyone, without a key, could otherwise fill the records at will.
  static bool unauthenticated(const RequestContext& ctx) {
    return ctx.error && (ctx.error->kind == ErrorKind::MissingApiKey || ctx.error->kind == ErrorKind::InvalidApiKey ||
                         ctx.error->kind == ErrorKind::UnknownPath || ctx.error->kind == ErrorKind::MethodNotAllowed);
  }

  // An upstream's answer that reached the client without usage: bill what was delivered.
  // (Not the gateway's own fallback answer: every upstream failed, nothing is billed.)
  static void settle(RequestContext& ctx, UsageState& st) {
    // Audio is metered in its own units (seconds, characters); bytes say nothing of them.
    if (ctx.usage.metered() || audioEndpoint(ctx.endpoint) || fileEndpoint(ctx.endpoint) || mcpEndpoint(ctx.endpoint) || !ctx.deployment || ctx.local_reply || ctx.nothingBilled() || ctx.bytes_out == 0)
      return;
    if (!(ctx.status >= 200 && ctx.status < 300) && ctx.status != 499) return;
    ctx.usage.prompt_tokens = static_cast<std::int64_t>((ctx.bytes_in + 3) / 4);
    ctx.usage.completion_tokens = st.delivered;
    ctx.usage.total_tokens = ctx.usage.prompt_tokens + st.delivered;
    st.usage_estimated = true;
  }

  // The record, into the export buffer (packed: the exporter formats it); one whose
  // quality verdict is pending goes to PendingRecords instead, as JSON.
  void record(const RequestContext& ctx, const UsageState& st) {
    if (pending_ && ctx.record_fields[static_cast<std::size_t>(RecordField::Quality)] == "pending") {
      scratch_.clear();
      pack(scratch_, ctx, st);
      JsonBuf text;
      formatUsageRecords(scratch_.view(), text);
      text.pop_back();  // its '\n'
      pending_->hold(PendingRecords::keyOf(ctx.request_id, ctx.start), std::string(text.view()));
      return;
    }
    pack(records_.data(), ctx, st);
    records_.commit();
  }

  void pack(JsonBuf& out, const RequestContext& ctx, const UsageState& st) const {
    using namespace std::chrono;
    const auto now_wall = system_clock::now();
    const auto now = steady_clock::now();
    UsageRecordHead r;
    UsageRecordWriter w;
    r.start_ns = duration_cast<nanoseconds>((now_wall - duration_cast<system_clock::duration>(now - ctx.start)).time_since_epoch()).count();
    r.end_ns = duration_cast<nanoseconds>((now_wall - duration_cast<system_clock::duration>(now - ctx.end)).time_since_epoch()).count();
    r.request_id = w.text(ctx.request_id);
    r.gateway = w.text(gateway_);
    r.region = w.text(ctx.config->region.name);
    if (ctx.principal.tenant) {
      r.has_tenant = true;
      r.tenant = w.text(ctx.principal.tenant->name);
    }
    if (ctx.principal.key) {
      r.has_key = true;
      r.key = w.text(ctx.principal.key->name);
      r.key_prefix = w.text(ctx.principal.key->prefix);
    }
    if (ctx.principal.caller) {
      r.has_caller = true;
      r.issuer = w.text(ctx.principal.caller->issuer);
      r.subject = w.text(ctx.principal.caller->subject);
    }
    r.api = apiName(ctx.endpoint);
    r.method = w.text(ctx.method);
    r.path = w.text(ctx.path);
    r.has_requested_model = ctx.requested_model || !ctx.facts.model.empty();
    r.requested_model = w.text(ctx.requested_model ? std::string_view(ctx.requested_model->name) : std::string_view(ctx.facts.model));
    if (ctx.model) {
      r.has_model = true;
      r.model = w.text(ctx.model->name);
    }
    if (ctx.provider) {
      r.has_provider = true;
      r.provider = w.text(ctx.provider->name);
    }
    if (ctx.deployment) {
      r.has_deployment = true;
      r.deployment = w.text(ctx.deployment->id);
      r.version = w.text(ctx.deployment->version);
    }
    r.route_name = w.text(ctx.route_name);
    r.stream = ctx.streaming || ctx.facts.stream;
    r.status = ctx.status;
    r.end_reason = endReason(ctx);
    if (ctx.error) {
      r.has_error = true;
      r.error = w.text(ctx.error->code());
    }
    r.replayed = ctx.local_reply && ctx.local_reply->replay;
    // Billed tokens: what the rate-limit calibration charged (settled above).
    const Usage& u = ctx.usage;
    r.prompt_tokens = u.prompt_tokens;
    r.completion_tokens = u.completion_tokens;
    r.cached_tokens = u.cached_tokens;
    r.images = u.images;
    r.audio_seconds = u.audio_seconds;
    r.characters = u.characters;
    r.usage_source = std::string_view(!u.present() ? "none" : st.usage_estimated ? "estimate" : "upstream");
    r.cost_usd = costUsd(ctx.model, u);
    r.duration_ns = duration_cast<nanoseconds>(ctx.end - ctx.start).count();
    if (ctx.first_byte) {
      r.has_ttft = true;
      r.ttft_ns = duration_cast<nanoseconds>(*ctx.first_byte - ctx.start).count();
    }
    r.bytes_out = ctx.bytes_out;
    r.attempts = ctx.attempts;
    r.fallback = w.text(ctx.fallback);
    for (std::size_t i = 0; i < kRecordFieldCount; ++i) r.record_field[i] = w.text(ctx.record_fields[i]);
    if (ctx.trace.valid()) {
      r.has_trace = true;
      r.trace_id = ctx.trace.trace_id;
    }
    w.write(out, r);
  }

  ExportBuffer& records_;
  PendingRecords* pending_;
  std::string gateway_;
  JsonBuf scratch_;  // a record that waits for its verdict, before it is formatted
};

}  // namespace

std::unique_ptr<Filter> makeUsageFilter(const Config& config, ExportBuffer& records, PendingRecords* pending) {
  return std::make_unique<UsageFilter>(config, records, pending);
}

}  // namespace tahua
