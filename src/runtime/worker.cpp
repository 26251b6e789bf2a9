#include "runtime/worker.h"

#include "core/log.h"

#include <openssl/rand.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <random>

#include "server/model_call.h"
#include "telemetry/json_out.h"
#include "filters/access_log/access_log_filter.h"
#include "filters/auth/auth_filter.h"
#include "filters/files/files_filter.h"
#include "filters/mcp/mcp_filter.h"
#include "filters/idempotency/idempotency_filter.h"
#include "filters/plugins/plugin_auth_link.h"
#include "filters/plugins/plugin_filter.h"
#include "filters/plugins/plugin_set.h"
#include "filters/prompts/prompt_filter.h"
#include "filters/responses/stored_responses_filter.h"
#include "filters/rate_limit/rate_limit_filter.h"
#include "filters/metrics/metrics_filter.h"
#include "filters/models/models_filter.h"
#include "filters/balancer/balancer_filter.h"
#include "filters/cache/cache_filter.h"
#include "filters/guardrails/guardrail_filter.h"
#include "filters/count_tokens/count_tokens_filter.h"
#include "filters/router/router_filter.h"
#include "filters/secrets/secret_filter.h"
#include "filters/tracing/trace_passthrough.h"
#include "filters/tracing/tracing_filter.h"
#include "filters/usage/usage_filter.h"
#include "runtime/gateway.h"
#include "server/upstream_client.h"
#include "core/thread_name.h"

namespace tahua {

Worker::Worker(unsigned id, unsigned worker_count, Gateway& gateway, SnapshotPtr snapshot, TenantDirectoryPtr tenants,
               std::shared_ptr<LogFile> access_log, ExportQueue* spans, ExportQueue* records)
    : id_(id), worker_count_(worker_count), balancer_(std::random_device{}() ^ (std::uint64_t{id} << 32)), gateway_(gateway),
      snapshot_(std::move(snapshot)), tenants_(std::move(tenants)), access_log_(std::move(access_log)),
      spans_(spans, 0), records_(records, 0), pool_(std::make_unique<UpstreamPool>()),
      upstream_env_{io_, *pool_, metrics_} {
  pending_records_ = std::make_unique<PendingRecords>(records_, *this);
  chain_ = buildChain();

  unsigned char rnd[4];
  RAND_bytes(rnd, sizeof rnd);
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
  request_id_prefix_ = std::string("req-") + prefix + "-" + std::to_string(id_) + "-";
}

Worker::~Worker() = default;

void Worker::post(std::function<void()> fn) { boost::asio::post(io_, std::move(fn)); }

namespace {
// The timer and the call share one state: the handle cancels it, and the completion
// moves the call out before running it, so the call may destroy its own handle.
struct DelayedCall {
  explicit DelayedCall(boost::asio::io_context& io) : timer(io) {}
  boost::asio::steady_timer timer;
  std::function<void()> fn;
};

class AsioTimerHandle final : public TimerHandle {
 public:
  explicit AsioTimerHandle(std::shared_ptr<DelayedCall> call) : call_(std::move(call)) {}
  ~AsioTimerHandle() override { cancel(); }
  void cancel() override {
    if (!call_) return;
    call_->fn = nullptr;
    call_->timer.cancel();
    call_.reset();
  }

 private:
  std::shared_ptr<DelayedCall> call_;
};
}  // namespace

std::unique_ptr<TimerHandle> Worker::runAfter(Millis delay, std::function<void()> fn) {
  auto call = std::make_shared<DelayedCall>(io_);
  call->fn = std::move(fn);
  call->timer.expires_after(delay);
  call->timer.async_wait([call](const boost::system::error_code&) {
    if (!call->fn) return;  // cancelled
    auto fn = std::move(call->fn);
    call->fn = nullptr;
    fn();
  });
  return std::make_unique<AsioTimerHandle>(std::move(call));
}

void Worker::fetch(OutboundRequest request, std::function<void(OutboundResponse)> done) {
  http_.fetch(std::move(request), std::move(done));
}

void Worker::callModel(ModelCall call, std::function<void(OutboundResponse)> done) {
  // The snapshot of now, pinned for the call (a reload may publish another meanwhile).
  auto run = [](SnapshotPtr snapshot, UpstreamEnv& env, ModelCall call, std::function<void(OutboundResponse)> done) -> boost::asio::awaitable<void> {
    OutboundResponse answer = co_await tahua::callModel(std::move(snapshot), env, std::move(call));
    done(std::move(answer));
  };
  // Posted: `done` never runs inside the caller (a filter pausing its request returns first).
  boost::asio::post(io_, [this, run, snapshot = snapshot_, call = std::move(call), done = std::move(done)]() mutable {
    boost::asio::co_spawn(io_, run(std::move(snapshot), upstream_env_, std::move(call), std::move(done)), boost::asio::detached);
  });
}

std::shared_ptr<FilterChain> Worker::buildChain() {
  // The filter chain, in order. Metrics and access log observe every request, so they
  // sit first and see onComplete even when a later filter stops the request.
  auto chain = std::make_shared<FilterChain>();
  const Config& config = *snapshot_->config;
  // First: its onComplete settles what the request is billed before any other filter's
  // reads it (metrics, rate-limit calibration, access log), then writes the usage record.
  if (records_.enabled() || rateLimitsConfigured(config, *tenants_)) chain->add(makeUsageFilter(config, records_, pending_records_.get()));
  // Before the access log (it logs the trace id) and any upstream attempt.
  if (spans_.enabled() && config.tracing.enabled) chain->add(makeTracingFilter(config, spans_));
  else chain->add(makeTracePassthroughFilter());
  chain->add(makeMetricsFilter(metrics_));
  if (config.access_log.enabled) chain->add(makeAccessLogFilter(access_log_, config.access_log));
  // The plugins' Lua states, shared by the plugin filter and the chains' plugin links.
  std::shared_ptr<PluginSet> plugins = config.plugins.empty() ? nullptr : std::make_shared<PluginSet>(config, *this, metrics_, gateway_.stateStore());
  // Before anything answers (the model list included): who is calling.
  if (config.auth.enabled) {
    PluginLinkFactory plugin_link;
    if (plugins) plugin_link = [&plugins](std::string_view id, const KeyTable& keys) { return makePluginAuthLink(plugins, id, keys); };
    chain->add(makeAuthFilter(config, tenants_, metrics_, plugin_link, this));
  }
  chain->add(makeModelsFilter());
  // Before the prompt templates and the router: a request continuing a stored
  // conversation is expanded first (the limits count, and the upstream gets, all of it);
  // GET / DELETE of a stored response are answered here.
  chain->add(makeStoredResponsesFilter(gateway_.stateStore(), metrics_));
  // Before the router: the model, the limits' estimate and the routes see the rendered
  // prompt.
  if (!config.prompts.empty()) chain->add(makePromptFilter());
  chain->add(makeRouterFilter());
  if (config.auth.enabled) chain->add(makeModelAccessFilter());  // the model is known now
  chain->add(makeFilesFilter(gateway_.stateStore(), *this));  // files and batches: routed and owned
  // The MCP gateway: after auth (the caller), before the plugins and the limits (a
  // tools/call is routed, named and checked first).
  if (!config.mcp.targets.empty()) chain->add(makeMcpFilter(gateway_.stateStore(), *this, metrics_));
  // Plugins see the routed model and the caller; before the limits, so a refusal costs
  // no quota and a changed body is what the limits estimate.
  if (plugins && std::any_of(config.plugins.begin(), config.plugins.end(), [](const PluginConfig& p) { return p.phases & ~kPluginAuth; }))
    chain->add(makePluginFilter(snapshot_->config, plugins));
  // After the router and the plugins (the model, route and caller are known; the body is
  // what goes upstream), before the limits: a blocked request is never charged. Its
  // response side runs before the cache and idempotency keep an answer: they keep the
  // answer as the guardrails left it.
  if (!config.guardrails.policies.empty()) chain->add(makeGuardrailFilter(metrics_, *this, *pending_records_));
  // Before the bulkhead: a request over its rate takes no slot and waits in no line.
  if (rateLimitsConfigured(config, *tenants_))
    chain->add(makeRateLimitFilter(config, tenants_, gateway_.stateStore(), metrics_));
  // After the limits (a hit is a request like any other), before the bulkhead and the
  // balancer (a hit takes no slot and picks no upstream).
  if (config.anyModelCached()) chain->add(makeCacheFilter(gateway_.responseCache(), metrics_, *this));
  // After the router (a request for an unknown model is a 404, not a 429; the route is
  // known), before the balancer: a request that waits for a slot picks its deployment
  // when it gets one.
  chain->add(makeBulkheadFilter(gateway_.bulkheads(), config, tenants_, metrics_, *this));
  chain->add(makeBalancerFilter(deployments_, config, nodes_, balancer_));
  chain->add(makeCountTokensFilter());  // answers locally unless the model is Anthropic's
  chain->add(makeCircuitBreakerFilter(metrics_));
  // Last among the response rewriters: what it passes on goes to the client.
  chain->add(makeSecretFilter());
  // After every rewriter: it keeps the answer as the client got it. Its request phase
  // (onRequestBody) still runs before any upstream is chosen.
  if (config.idempotency.enabled) chain->add(makeIdempotencyFilter(gateway_.stateStore(), *this));
  return chain;
}

void Worker::setTenants(TenantDirectoryPtr tenants) {
  tenants_ = std::move(tenants);
  chain_ = buildChain();
}

void Worker::setSnapshot(SnapshotPtr snapshot, TenantDirectoryPtr tenants) {
  snapshot_ = std::move(snapshot);
  tenants_ = std::move(tenants);
  chain_ = buildChain();
  // Idle connections were set up for the old providers (TLS settings, proxy): start
  // fresh. Connections in use finish their request and are then dropped.
  pool_->clear();
}

SessionHost::Readiness Worker::readiness(const Config& config) const {
  Readiness r;
  r.ready = gateway_.ready(config);
  r.resources_listed = gateway_.resourcesListed();
  // Each required model: a deployment this worker's balancer would pick now (this
  // worker's view of ejections and breakers: a probe lands on one worker).
  const auto now = SteadyClock::now();
  for (const std::string& name : config.server.ready_models) {
    const ModelConfig* m = config.findModel(name);
    bool usable = false;
    for (std::size_t i = 0; m && !usable && i < m->deployments.size(); ++i) {
      const DeploymentConfig& d = m->deployments[i];
      if (!config.providers[d.provider_index].usable) continue;
      const DeploymentState* s = deployments_.find(m->name, d.id);
      usable = !s || (s->ejected_until <= now && !(s->breaker.state == Breaker::State::Open && s->breaker.open_until > now));
    }
    if (!r.models.empty()) r.models += ',';
    json_out::string(r.models, name);
    r.models += usable ? ":\"ok\"" : ":\"no_usable_deployment\"";
    r.ready = r.ready && usable;
  }
  return r;
}

bool Worker::gatewayDraining() const { return gateway_.draining(); }

boost::asio::awaitable<std::string> Worker::renderMetrics() { return gateway_.renderMetrics(); }

boost::asio::awaitable<AdminReply> Worker::admin(std::string_view method, std::string_view path,
                                                 std::string_view authorization, std::string_view accept,
                                                 std::string& body) {
  return gateway_.adminApi().handle(snapshot_, nodes_, method, path, authorization, accept, body);
}

void Worker::nextRequestId(std::string& into) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, ++request_counter_, 16);
  into.assign(request_id_prefix_);
  into.append(buf, end);
}

void Worker::registerSession(SessionBase* s, bool admin) {
  s->prev_ = nullptr;
  s->next_ = sessions_;
  if (sessions_) sessions_->prev_ = s;
  sessions_ = s;
  (admin ? admin_sessions_ : live_sessions_).fetch_add(1, std::memory_order_relaxed);
}

void Worker::unregisterSession(SessionBase* s, bool admin) {
  watchSoonCancel(s);
  if (s->prev_) s->prev_->next_ = s->next_;
  else sessions_ = s->next_;
  if (s->next_) s->next_->prev_ = s->prev_;
  s->prev_ = s->next_ = nullptr;
  (admin ? admin_sessions_ : live_sessions_).fetch_sub(1, std::memory_order_relaxed);
}

void Worker::watchSoon(SessionBase* s) {
  if (s->watch_queued_) return;
  s->watch_queued_ = true;
  s->watch_prev_ = nullptr;
  s->watch_next_ = watch_soon_;
  if (watch_soon_) watch_soon_->watch_prev_ = s;
  watch_soon_ = s;
  if (watch_timer_armed_) return;
  // One timer for all: it runs only while some request waits for its watch.
  if (!watch_timer_) watch_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  watch_timer_armed_ = true;
  watch_timer_->expires_after(SessionHost::kWatchDelay);
  watch_timer_->async_wait([this](boost::system::error_code ec) {
    watch_timer_armed_ = false;
    if (!ec) watchTick();
  });
}

void Worker::watchSoonCancel(SessionBase* s) {
  if (!s->watch_queued_) return;
  if (s->watch_prev_) s->watch_prev_->watch_next_ = s->watch_next_;
  else watch_soon_ = s->watch_next_;
  if (s->watch_next_) s->watch_next_->watch_prev_ = s->watch_prev_;
  s->watch_prev_ = s->watch_next_ = nullptr;
  s->watch_queued_ = false;
}

void Worker::watchTick() {
  // One at a time from the head: the list stays whole whatever arming one changes.
  while (SessionBase* s = watch_soon_) {
    watchSoonCancel(s);
    s->armClientWatch();
  }
}

void Worker::run() {
  nameThisThread("tahua-worker-" + std::to_string(id_));
  scheduleLogFlush();
  scheduleHeartbeatSweep();
  if (id_ == 0) {
    batch_poller_ = std::make_unique<BatchPoller>(gateway_.stateStore(), *this, static_cast<BatchPollerHost&>(*this));
    batch_poller_->start();
  }
  io_.run();
  // What this worker collected goes to the exporters before the gateway stops them.
  access_log_.flush();
  spans_.flush();
  pending_records_->writeHeld();
  records_.flush();
}

void Worker::scheduleLogFlush() {
  if (!flush_timer_) flush_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  flush_timer_->expires_after(std::chrono::milliseconds(200));
  flush_timer_->async_wait([this](boost::system::error_code ec) {
    access_log_.flush();
    spans_.flush();
    records_.flush();
    if (!ec) scheduleLogFlush();
  });
}

// One timer per worker walks the sessions for stream heartbeats; a quarter of the
// interval keeps each heartbeat within 25% of its due time.
void Worker::scheduleHeartbeatSweep() {
  if (!heartbeat_timer_) heartbeat_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  const Millis interval = snapshot_->config->server.stream_heartbeat;
  const Millis period = interval.count() == 0 ? Millis(1000) : std::clamp(interval / 4, Millis(10), Millis(1000));
  heartbeat_timer_->expires_after(period);
  heartbeat_timer_->async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    const auto now = std::chrono::steady_clock::now();
    for (SessionBase* s = sessions_; s;) {
      SessionBase* next = s->next_;
      s->heartbeatTick(now);
      s = next;
    }
    scheduleHeartbeatSweep();
  });
}

// An ended batch's usage for one model, as a request of its own that only completes:
// the chain's onComplete writes its usage record and access log line and counts it.
void Worker::meterBatch(const BatchUsage& u) {
  RequestContext ctx;
  ctx.config = snapshot_->config;
  ctx.worker_id = id_;
  ctx.request_id = "batch-" + u.batch_id;
  ctx.endpoint = Endpoint::Batches;
  ctx.method = "POST";
  ctx.path = "/v1/batches";
  if (!u.owner.empty() && !u.owner.starts_with("key:")) ctx.principal.tenant = tenants_->tenant(u.owner);
  if (!u.key.empty()) ctx.principal.key = tenants_->key(u.key);
  const Config& cfg = *ctx.config;
  ctx.model = cfg.findModel(u.model);
  if (!ctx.model) ctx.model = cfg.files.targetOf(u.provider);
  ctx.requested_model = ctx.model;
  for (const auto& p : cfg.providers)
    if (p.name == u.provider) ctx.provider = &p;
  ctx.usage = u.usage;
  ctx.status = 200;
  ctx.start = ctx.end = std::chrono::steady_clock::now();
  std::vector<std::max_align_t> block((chain_->stateBytes() + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t) + 1);
  chain_->begin(ctx, reinterpret_cast<std::byte*>(block.data()));
  chain_->complete(ctx);
  log::info("batch metered", {{"batch", u.batch_id}, {"model", u.model}, {"requests", u.requests},
                              {"prompt_tokens", u.usage.prompt_tokens}, {"completion_tokens", u.usage.completion_tokens}});
}

void Worker::beginDrain() {
  draining_ = true;
  for (auto& close : acceptor_closers_) close();
  acceptor_closers_.clear();
  // closeIfIdle may unregister the session it is called on (not synchronously: the
  // session's coroutine resumes later), but walk with a saved next pointer anyway.
  for (SessionBase* s = sessions_; s;) {
    SessionBase* next = s->next_;
    s->closeIfIdle();
    s = next;
  }
}

void Worker::drainDeadline() {
  drain_deadline_passed_ = true;
  for (SessionBase* s = sessions_; s;) {
    SessionBase* next = s->next_;
    s->abortForDrain();
    s = next;
  }
}

void Worker::stop() {
  if (batch_poller_) batch_poller_->stop();
  pool_->clear();
  http_.closeAll();
  if (flush_timer_) flush_timer_->cancel();
  if (heartbeat_timer_) heartbeat_timer_->cancel();
  if (watch_timer_) watch_timer_->cancel();
  io_.stop();
}

}  // namespace tahua
