#include "filters/metrics/metrics_filter.h"

#include <algorithm>

namespace tahua {
namespace {

double seconds(SteadyTime from, SteadyTime to) { return std::chrono::duration<double>(to - from).count(); }

struct MetricsState {
  SteadyTime attempt_start{};  // the upstream attempt in flight (none: epoch)
};

class MetricsFilter final : public FilterWithState<MetricsState> {
 public:
  explicit MetricsFilter(WorkerMetrics& m) : m_(m) {}
  std::string_view name() const override { return "metrics"; }

  void onUpstreamRequest(RequestContext& ctx, UpstreamRequestHeaders&) override {
    state(ctx).attempt_start = std::chrono::steady_clock::now();
  }
  void onAttemptFailed(RequestContext& ctx) override {
    // An answer the gateway refused (the quality check) is the deployment's status, not the refusal's.
    const bool answered = ctx.status != 0 && ctx.error && ctx.error->source() == ErrorSource::Gateway;
    attemptEnded(ctx, std::chrono::steady_clock::now(), ctx.error && !answered ? ctx.error->httpStatus() : ctx.status);
  }

  void onResponseHeaders(RequestContext& ctx) override {
    if (ctx.streaming) ++m_.active_streams;
  }

  void onComplete(RequestContext& ctx) override {
    if (ctx.streaming) --m_.active_streams;
    // Requests that never named a model (404 path, bad JSON) are counted under "".
    std::string_view model = ctx.model ? std::string_view(ctx.model->name) : std::string_view{};
    std::string_view provider = ctx.provider ? std::string_view(ctx.provider->name) : std::string_view{};
    ModelSeries& s = m_.series(model, provider);
    ++s.requests_by_status[ctx.status];
    s.duration.observe(seconds(ctx.start, ctx.end));
    attemptEnded(ctx, ctx.end, ctx.status);
    if (!ctx.route_name.empty()) {
      auto r = m_.routes.find(ctx.route_name);
      if (r == m_.routes.end()) r = m_.routes.try_emplace(std::string(ctx.route_name)).first;
      ++r->second[ctx.status];
    }
    if (ctx.streaming && ctx.first_byte && ctx.chunks_out > 1)
      s.inter_token.observe(seconds(*ctx.first_byte, ctx.end) / static_cast<double>(ctx.chunks_out - 1));
    if (ctx.usage.present())
      s.tokens.observe(static_cast<double>(std::max<std::int64_t>(ctx.usage.prompt_tokens, 0) +
                                           std::max<std::int64_t>(ctx.usage.completion_tokens, 0)));
    // Errors produce no tokens: only successful answers feed the TTFT histogram.
    if (ctx.first_byte && ctx.status >= 200 && ctx.status < 300) s.ttft.observe(seconds(ctx.start, *ctx.first_byte));
    if (ctx.usage.prompt_tokens > 0) s.prompt_tokens += static_cast<std::uint64_t>(ctx.usage.prompt_tokens);
    if (ctx.usage.completion_tokens > 0) s.completion_tokens += static_cast<std::uint64_t>(ctx.usage.completion_tokens);
    if (ctx.usage.cached_tokens > 0) s.cached_tokens += static_cast<std::uint64_t>(ctx.usage.cached_tokens);
    const double cost = costUsd(ctx.model, ctx.usage);
    if (cost > 0) s.cost_usd += cost;
    if (ctx.principal.tenant && ctx.config->server.tenant_metrics) tenantSeries(ctx, cost);
    if (ctx.error && ctx.error->source() == ErrorSource::Upstream) {
      auto key = std::pair<std::string_view, std::string_view>(provider, ctx.error->code());
      auto it = m_.upstream_errors.find(key);
      if (it == m_.upstream_errors.end()) m_.upstream_errors[{std::string(provider), std::string(ctx.error->code())}] = 1;
      else ++it->second;
      if (const char* kind = ctx.error->timeout_kind) {
        auto tk = std::pair<std::string_view, std::string_view>(provider, kind);
        auto t = m_.upstream_timeouts.find(tk);
        if (t == m_.upstream_timeouts.end()) m_.upstream_timeouts[{std::string(provider), std::string(kind)}] = 1;
        else ++t->second;
      }
    }
  }

 private:
  // Bounded: past kMaxTenantSeries tenants, the rest share the series "other".
  void tenantSeries(const RequestContext& ctx, double cost) {
    std::string_view name = ctx.principal.tenant->name;
    auto it = m_.tenants.find(name);
    if (it == m_.tenants.end()) {
      if (m_.tenants.size() >= WorkerMetrics::kMaxTenantSeries) name = "other";
      it = m_.tenants.try_emplace(std::string(name)).first;
    }
    WorkerMetrics::TenantSeries& t = it->second;
    ++t.requests_by_status[ctx.status];
    if (ctx.usage.prompt_tokens > 0) t.prompt_tokens += static_cast<std::uint64_t>(ctx.usage.prompt_tokens);
    if (ctx.usage.completion_tokens > 0) t.completion_tokens += static_cast<std::uint64_t>(ctx.usage.completion_tokens);
    if (cost > 0) t.cost_usd += cost;
  }

  // One upstream call of ctx.deployment ended: its status and its time.
  void attemptEnded(RequestContext& ctx, SteadyTime end, int status) {
    MetricsState& st = state(ctx);
    if (st.attempt_start == SteadyTime{} || !ctx.deployment || !ctx.model) return;
    auto key = std::pair<std::string_view, std::string_view>(ctx.model->name, ctx.deployment->id);
    auto it = m_.deployments.find(key);
    if (it == m_.deployments.end()) it = m_.deployments.try_emplace({ctx.model->name, ctx.deployment->id}).first;
    ++it->second.requests_by_status[status];
    it->second.upstream.observe(seconds(st.attempt_start, end));
    st.attempt_start = SteadyTime{};
  }

  WorkerMetrics& m_;
};

}  // namespace

std::unique_ptr<Filter> makeMetricsFilter(WorkerMetrics& metrics) { return std::make_unique<MetricsFilter>(metrics); }

}  // namespace tahua
