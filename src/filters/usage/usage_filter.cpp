#include "filters/usage/usage_filter.h"

#include "filters/usage/pending_records.h"
#include "request/end_reason.h"
#include "telemetry/json_out.h"
#include "telemetry/trace_context.h"
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
  static bool unauthenticated(const RequestContext& ctx) {
    return ctx.error && (ctx.error->kind == ErrorKind::MissingApiKey || ctx.error->kind == ErrorKind::InvalidApiKey);
  }

  // An upstream's answer that reached the client without usage: bill what was delivered.
  // (Not the gateway's own fallback answer: every upstream failed, nothing is billed.)
  static void settle(RequestContext& ctx, UsageState& st) {
    // Audio is metered in its own units (seconds, characters); bytes say nothing of them.
    if (ctx.usage.metered() || audioEndpoint(ctx.endpoint) || fileEndpoint(ctx.endpoint) || mcpEndpoint(ctx.endpoint) || !ctx.deployment || ctx.local_reply || ctx.fallback == "response" || ctx.bytes_out == 0 ||
        !ctx.first_byte)
      return;
    if (!(ctx.status >= 200 && ctx.status < 300) && ctx.status != 499) return;
    ctx.usage.prompt_tokens = static_cast<std::int64_t>((ctx.bytes_in + 3) / 4);
    ctx.usage.completion_tokens = st.delivered;
    ctx.usage.total_tokens = ctx.usage.prompt_tokens + st.delivered;
    st.usage_estimated = true;
  }

  // The record, into the export buffer; one whose quality verdict is pending goes to
  // PendingRecords instead.
  void record(const RequestContext& ctx, const UsageState& st) {
    JsonBuf& out = records_.data();
    const std::size_t from = out.size();
    write(out, ctx, st);
    if (pending_ && ctx.record_fields[static_cast<std::size_t>(RecordField::Quality)] == "pending") {
      std::string text(out.view().substr(from));
      out.truncate(from);
      pending_->hold(PendingRecords::keyOf(ctx.request_id, ctx.start), std::move(text));
      return;
    }
    records_.commit();
  }

  void write(JsonBuf& out, const RequestContext& ctx, const UsageState& st) const {
    namespace j = json_out;
    using namespace std::chrono;
    const auto now_wall = system_clock::now();
    const auto now = steady_clock::now();
    const auto start_wall = now_wall - duration_cast<system_clock::duration>(now - ctx.start);
    const auto end_wall = now_wall - duration_cast<system_clock::duration>(now - ctx.end);
    char id[36];
    uuidV7(id);
    out.raw(std::string_view("{\"record_id\":\""));  // first, at a fixed place: sinks read it without parsing
    out.raw(id, 36);
    out.push_back('"');
    j::key(out, "request_id");
    j::string(out, ctx.request_id);
    j::key(out, "ts");
    j::time(out, start_wall);
    j::key(out, "end_ts");
    j::time(out, end_wall);
    if (!gateway_.empty()) {
      j::key(out, "gateway");
      j::string(out, gateway_);
    }
    if (!ctx.config->region.name.empty()) {  // several regions bill through one pipeline
      j::key(out, "region");
      j::string(out, ctx.config->region.name);
    }
    auto strOrNull = [&](std::string_view k, const std::string* v) {
      j::key(out, k);
      if (v) j::string(out, *v);
      else out.raw(std::string_view("null"));
    };
    strOrNull("tenant", ctx.principal.tenant ? &ctx.principal.tenant->name : nullptr);
    strOrNull("key", ctx.principal.key ? &ctx.principal.key->name : nullptr);
    strOrNull("key_prefix", ctx.principal.key && !ctx.principal.key->prefix.empty() ? &ctx.principal.key->prefix : nullptr);
    // A caller signed in with a JWT: who (per-person figures live here, never in metrics).
    strOrNull("issuer", ctx.principal.caller ? &ctx.principal.caller->issuer : nullptr);
    strOrNull("subject", ctx.principal.caller ? &ctx.principal.caller->subject : nullptr);
    j::key(out, "api");
    j::string(out, apiName(ctx.endpoint));
    j::key(out, "method");
    j::string(out, ctx.method);
    j::key(out, "path");
    j::string(out, ctx.path);
    j::key(out, "requested_model");
    if (ctx.requested_model) j::string(out, ctx.requested_model->name);
    else if (!ctx.facts.model.empty()) j::string(out, ctx.facts.model);
    else out.raw(std::string_view("null"));
    strOrNull("model", ctx.model ? &ctx.model->name : nullptr);
    strOrNull("provider", ctx.provider ? &ctx.provider->name : nullptr);
    strOrNull("deployment", ctx.deployment ? &ctx.deployment->id : nullptr);
    strOrNull("version", ctx.deployment ? &ctx.deployment->version : nullptr);
    j::key(out, "route_name");
    if (!ctx.route_name.empty()) j::string(out, ctx.route_name);
    else out.raw(std::string_view("null"));
    j::key(out, "stream");
    out.raw(ctx.streaming || ctx.facts.stream ? std::string_view("true") : std::string_view("false"));
    j::key(out, "status");
    j::integer(out, ctx.status);
    j::key(out, "end_reason");
    j::string(out, endReason(ctx));
    j::key(out, "error");
    if (ctx.error) j::string(out, ctx.error->code());
    else out.raw(std::string_view("null"));
    const bool replay = ctx.local_reply && ctx.local_reply->replay;
    j::key(out, "replayed");
    out.raw(replay ? std::string_view("true") : std::string_view("false"));
    // Billed tokens: what the rate-limit calibration charged (settled above).
    const Usage& u = ctx.usage;
    auto tokens = [&](std::string_view k, std::int64_t v) {
      j::key(out, k);
      j::integer(out, std::max<std::int64_t>(v, 0));
    };
    tokens("prompt_tokens", u.prompt_tokens);
    tokens("completion_tokens", u.completion_tokens);
    tokens("cached_tokens", u.cached_tokens);
    tokens("total_tokens", std::max<std::int64_t>(u.prompt_tokens, 0) + std::max<std::int64_t>(u.completion_tokens, 0));
    // Units priced besides tokens: null when the endpoint has none.
    j::key(out, "images");
    if (u.images >= 0) j::integer(out, u.images);
    else out.raw(std::string_view("null"));
    j::key(out, "audio_seconds");
    if (u.audio_seconds >= 0) j::number(out, u.audio_seconds);
    else out.raw(std::string_view("null"));
    j::key(out, "characters");
    if (u.characters >= 0) j::integer(out, u.characters);
    else out.raw(std::string_view("null"));
    j::key(out, "usage_source");
    j::string(out, !u.present() ? "none" : st.usage_estimated ? "estimate" : "upstream");
    j::key(out, "cost_usd");
    const double cost = costUsd(ctx.model, u);
    if (cost >= 0) j::number(out, cost);
    else out.raw(std::string_view("null"));  // the model has no pricing
    j::key(out, "duration_ms");
    j::millis(out, ctx.end - ctx.start);
    j::key(out, "ttft_ms");
    if (ctx.first_byte) j::millis(out, *ctx.first_byte - ctx.start);
    else out.raw(std::string_view("null"));
    j::key(out, "bytes_out");
    j::integer(out, static_cast<std::int64_t>(ctx.bytes_out));
    j::key(out, "attempts");
    j::integer(out, ctx.attempts);
    j::key(out, "fallback");
    if (!ctx.fallback.empty()) j::string(out, ctx.fallback);
    else out.raw(std::string_view("null"));
    for (std::size_t i = 0; i < ctx.record_fields.size(); ++i) {
      j::key(out, recordFieldName(static_cast<RecordField>(i)));
      if (ctx.record_fields[i].empty()) out.raw(std::string_view("null"));
      else if (recordFieldNumeric(static_cast<RecordField>(i))) out.raw(ctx.record_fields[i]);
      else j::string(out, ctx.record_fields[i]);
    }
    j::key(out, "trace_id");
    if (ctx.trace.valid()) {
      char hex[32];
      ctx.trace.traceIdHex(hex);
      j::string(out, std::string_view(hex, 32));
    } else {
      out.raw(std::string_view("null"));
    }
    out.push_back('}');
  }

  ExportBuffer& records_;
  PendingRecords* pending_;
  std::string gateway_;
};

}  // namespace

std::unique_ptr<Filter> makeUsageFilter(const Config& config, ExportBuffer& records, PendingRecords* pending) {
  return std::make_unique<UsageFilter>(config, records, pending);
}

}  // namespace tahua
