#include "filters/bulkhead/bulkhead_filter.h"

#include <array>
#include <unordered_map>

#include "telemetry/metrics.h"

namespace tahua {
namespace {

// A request waiting in line for a slot. Shared by the wake-up (from whichever thread
// freed the slot, posted to this worker) and the timeout: the first to run decides.
struct Wait {
  std::shared_ptr<QueueTicket> ticket;
  ConcurrencyLimit* cap = nullptr;
  std::unique_ptr<TimerHandle> timeout;
  RequestContext* ctx = nullptr;  // valid while !done: the request is paused on it
  bool done = false;
};

constexpr std::size_t kCaps = 8;  // global, route, tenant, key: requests and streams each

struct BulkheadState {
  std::array<ConcurrencyLimit*, kCaps> held{};  // slots this request holds, released in onComplete
  std::size_t held_count = 0;
  std::size_t next_cap = 0;                 // caps [0, next_cap) are taken (or skipped)
  std::string_view scope;                   // the scope that refused or queued it
};

class BulkheadFilter final : public FilterWithState<BulkheadState> {
 public:
  BulkheadFilter(Bulkheads& bulkheads, const Config& config, TenantDirectoryPtr directory, WorkerMetrics& metrics,
                 WorkerServices& services)
      : global_(bulkheads.global()), directory_(std::move(directory)), metrics_(metrics), services_(services) {
    // Caps resolved once per config and directory, so a request only looks up pointers.
    routes_.reserve(config.routes.size());
    for (const RouteConfig& r : config.routes)
      routes_.push_back(r.max_concurrent_requests || r.max_concurrent_streams ? bulkheads.route(r.name) : nullptr);
    if (directory_) {
      for (const auto& t : directory_->tenants)
        if (t.limits.anyCap()) tenants_.emplace(&t, bulkheads.scoped("tenant:" + t.name));
      for (const auto& k : directory_->keys)
        if (k.limits.anyCap()) keys_.emplace(&k, bulkheads.scoped("key:" + k.name));
    }
  }
  std::string_view name() const override { return "bulkhead"; }

  // After the router (route and `stream` are known), before the balancer (a request that
  // waits for a slot has not picked its deployment yet).
  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    if (ctx.endpoint == Endpoint::Models || ctx.endpoint == Endpoint::None) return FilterStatus::Continue;
    return acquire(ctx);
  }

  void onComplete(RequestContext& ctx) override {
    BulkheadState& st = state(ctx);
    for (std::size_t i = 0; i < st.held_count; ++i) st.held[i]->release();
    st.held_count = 0;
  }

 private:
  // The caps of this request, in a fixed order (so two requests never wait on each
  // other's slots); absent or unlimited ones are null.
  std::array<ConcurrencyLimit*, kCaps> caps(RequestContext& ctx) {
    Bulkheads::Pair* route = nullptr;
    if (ctx.route) route = routes_[static_cast<std::size_t>(ctx.route - ctx.config->routes.data())];
    Bulkheads::Pair* tenant = find(tenants_, ctx.principal.tenant);
    Bulkheads::Pair* key = find(keys_, ctx.principal.key);
    const bool stream = ctx.facts.stream;
    std::array<ConcurrencyLimit*, kCaps> c = {&global_.requests,
                                              stream ? &global_.streams : nullptr,
                                              route ? &route->requests : nullptr,
                                              route && stream ? &route->streams : nullptr,
                                              tenant ? &tenant->requests : nullptr,
                                              tenant && stream ? &tenant->streams : nullptr,
                                              key ? &key->requests : nullptr,
                                              key && stream ? &key->streams : nullptr};
    for (auto& cap : c)
      if (cap && cap->limit() == 0) cap = nullptr;
    return c;
  }

  // Takes the caps from st.next_cap on. Pauses on a full one when waiting is allowed.
  FilterStatus acquire(RequestContext& ctx) {
    static constexpr std::string_view kScopes[kCaps] = {"global", "global", "route", "route", "tenant", "tenant", "key", "key"};
    BulkheadState& st = state(ctx);
    const auto c = caps(ctx);
    for (; st.next_cap < c.size(); ++st.next_cap) {
      ConcurrencyLimit* cap = c[st.next_cap];
      if (!cap) continue;
      if (cap->tryAcquire()) {
        st.held[st.held_count++] = cap;
        continue;
      }
      st.scope = kScopes[st.next_cap];
      if (ctx.config->limits.queue_timeout.count() > 0 && ctx.resumer) return waitFor(*cap, ctx);
      reject(ctx);
      return FilterStatus::Stop;
    }
    return FilterStatus::Continue;
  }

  FilterStatus waitFor(ConcurrencyLimit& cap, RequestContext& ctx) {
    auto wait = std::make_shared<Wait>();
    wait->cap = &cap;
    wait->ctx = &ctx;
    wait->ticket = std::make_shared<QueueTicket>();
    // Granted (possibly on another worker's thread): continue on ours.
    wait->ticket->wake = [this, w = std::weak_ptr<Wait>(wait)] {
      services_.post([this, w] {
        if (auto wait = w.lock()) finishWait(*wait, true);
      });
    };
    switch (cap.enqueue(wait->ticket, ctx.config->limits.max_queue)) {
      case ConcurrencyLimit::Enqueued::Acquired: {
        BulkheadState& st = state(ctx);
        st.held[st.held_count++] = &cap;
        ++st.next_cap;
        return acquire(ctx);
      }
      case ConcurrencyLimit::Enqueued::Full: reject(ctx); return FilterStatus::Stop;
      case ConcurrencyLimit::Enqueued::Queued: break;
    }
    // The timer's callback keeps the wait alive until it runs or is cancelled.
    wait->timeout = services_.runAfter(ctx.config->limits.queue_timeout, [this, wait] { finishWait(*wait, false); });
    return FilterStatus::Pause;
  }

  // The slot came (granted) or the wait timed out; whichever runs first decides.
  void finishWait(Wait& wait, bool granted) {
    if (wait.done) return;
    wait.done = true;
    RequestContext& ctx = *wait.ctx;
    if (!granted && wait.cap->withdraw(wait.ticket)) {
      reject(ctx);
      wait.timeout.reset();
      ctx.resumer->resume(FilterStatus::Stop);
      return;
    }
    // Granted, or granted just before the timeout withdrew it: the request holds the slot.
    BulkheadState& st = state(ctx);
    st.held[st.held_count++] = wait.cap;
    ++st.next_cap;
    const FilterStatus next = acquire(ctx);  // the caps after this one
    auto timer = std::move(wait.timeout);    // may destroy `wait` (it owns the timer's callback)
    if (next != FilterStatus::Pause) ctx.resumer->resume(next);
  }

  void reject(RequestContext& ctx) {
    const std::string_view scope = state(ctx).scope;
    std::string name;  // the scope's name: the route's, the tenant's, the key's
    if (scope == "route") name = ctx.route_name;
    else if (scope == "tenant" && ctx.principal.tenant) name = ctx.principal.tenant->name;
    else if (scope == "key" && ctx.principal.key) name = ctx.principal.key->name;
    ++metrics_.bulkhead_rejections[scope == "global" ? std::string("global") : std::string(scope) + ":" + name];
    Error e{ErrorKind::ConcurrencyLimited, scope == "global" ? std::string("Too many concurrent requests; please retry shortly.")
                                                             : "Too many concurrent requests for " + std::string(scope) + " '" +
                                                                   name + "'; please retry shortly."};
    e.retry_after_seconds = 1;
    ctx.fail(std::move(e));
  }

  template <class Map, class K>
  static Bulkheads::Pair* find(const Map& m, const K* k) {
    if (!k || m.empty()) return nullptr;
    auto it = m.find(k);
    return it == m.end() ? nullptr : it->second;
  }

  Bulkheads::Pair& global_;
  std::vector<Bulkheads::Pair*> routes_;
  TenantDirectoryPtr directory_;  // the tenants and keys the maps below point into
  std::unordered_map<const TenantConfig*, Bulkheads::Pair*> tenants_;
  std::unordered_map<const ApiKeyConfig*, Bulkheads::Pair*> keys_;
  WorkerMetrics& metrics_;
  WorkerServices& services_;
};

}  // namespace

std::unique_ptr<Filter> makeBulkheadFilter(Bulkheads& bulkheads, const Config& config, TenantDirectoryPtr directory,
                                           WorkerMetrics& metrics, WorkerServices& services) {
  return std::make_unique<BulkheadFilter>(bulkheads, config, std::move(directory), metrics, services);
}

}  // namespace tahua
