#include "filters/bulkhead/bulkhead_filter.h"

#include "telemetry/metrics.h"

namespace tahua {
namespace {

class BulkheadFilter final : public Filter {
 public:
  BulkheadFilter(Bulkheads& bulkheads, const Config& config, WorkerMetrics& metrics)
      : global_(bulkheads.global()), metrics_(metrics) {
    // Route caps resolved once per config, so a request only indexes a vector.
    routes_.reserve(config.routes.size());
    for (const RouteConfig& r : config.routes)
      routes_.push_back(r.max_concurrent_requests || r.max_concurrent_streams ? bulkheads.route(r.name) : nullptr);
  }
  std::string_view name() const override { return "bulkhead"; }

  // After the router (route and `stream` are known), before the balancer (a request that
  // waits for a slot has not picked its deployment yet). Called again after a Wait: the
  // slots already held are kept (the caps are taken in a fixed order).
  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    if (ctx.endpoint == Endpoint::Models || ctx.endpoint == Endpoint::None) return FilterStatus::Continue;
    Bulkheads::Pair* route = nullptr;
    if (ctx.route) route = routes_[static_cast<std::size_t>(ctx.route - ctx.config->routes.data())];
    const bool stream = ctx.facts.stream;
    ConcurrencyLimit* caps[4] = {&global_.requests, stream ? &global_.streams : nullptr, route ? &route->requests : nullptr,
                                 route && stream ? &route->streams : nullptr};
    static constexpr std::string_view kScopes[4] = {"global", "global", "route", "route"};
    std::size_t position = 0;  // caps taken (or skipped) so far, in order
    for (std::size_t i = 0; i < 4; ++i) {
      ConcurrencyLimit* cap = caps[i];
      if (!cap || cap->limit() == 0) continue;
      if (position++ < ctx.bulkhead_held_count) continue;  // taken before a Wait
      if (cap->tryAcquire()) {
        ctx.bulkhead_held[ctx.bulkhead_held_count++] = cap;
        continue;
      }
      ctx.bulkhead_scope = kScopes[i];
      if (ctx.config->limits.queue_timeout.count() > 0 && ctx.bulkhead_wait != cap) {
        ctx.bulkhead_wait = cap;  // the session queues the request here, then calls again
        return FilterStatus::Wait;
      }
      reject(ctx);
      return FilterStatus::Stop;
    }
    ctx.bulkhead_wait = nullptr;
    return FilterStatus::Continue;
  }

  void onComplete(RequestContext& ctx) override {
    for (std::size_t i = 0; i < ctx.bulkhead_held_count; ++i) ctx.bulkhead_held[i]->release();
    ctx.bulkhead_held_count = 0;
  }

 private:
  void reject(RequestContext& ctx) {
    ++metrics_.bulkhead_rejections[ctx.bulkhead_scope == "route" ? "route:" + std::string(ctx.route_name) : std::string("global")];
    Error e{ErrorKind::ConcurrencyLimited, ctx.bulkhead_scope == "route"
                                               ? "Too many concurrent requests on route '" + std::string(ctx.route_name) + "'; please retry shortly."
                                               : std::string("Too many concurrent requests; please retry shortly.")};
    e.retry_after_seconds = 1;
    ctx.fail(std::move(e));
  }

  Bulkheads::Pair& global_;
  std::vector<Bulkheads::Pair*> routes_;
  WorkerMetrics& metrics_;
};

}  // namespace

std::unique_ptr<Filter> makeBulkheadFilter(Bulkheads& bulkheads, const Config& config, WorkerMetrics& metrics) {
  return std::make_unique<BulkheadFilter>(bulkheads, config, metrics);
}

}  // namespace tahua
