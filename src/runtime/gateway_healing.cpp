// The gateway's side of self-healing: every healing.interval, collect the workers'
// deployment counters, let the rules decide, and re-publish the config with the change.
// The decisions are in src/healing/healing_engine.cpp; the overrides in force and the
// audit trail in src/healing/healing_state.cpp.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "core/log.h"
#include "runtime/gateway.h"
#include "runtime/worker.h"
#include "telemetry/metrics.h"

namespace tahua {

namespace asio = boost::asio;

namespace {
// One worker's deployment counters, read on its own thread.
asio::awaitable<HealthSample> workerHealth(Worker* w) {
  HealthSample out;
  const Config& cfg = *w->snapshot()->config;
  for (const auto& m : cfg.models)
    for (const auto& d : m.deployments)
      if (const DeploymentState* s = w->deployments().find(m.name, d.id)) {
        HealthCounters& c = out[{m.name, d.id}];
        c.requests = s->requests;
        c.failures = s->failures;
        c.ttft = s->ttft_buckets;
      }
  co_return out;
}

}  // namespace

asio::awaitable<void> Gateway::healingLoop() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    Millis interval;
    bool any = false;
    {
      std::lock_guard lock(mutex_);
      interval = snapshot_->config->healing.interval;
      any = !healing_.engine().targets().empty();
    }
    timer.expires_after(interval);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec || draining()) co_return;
    if (!any) continue;
    HealthSample sample = co_await collectHealth();
    if (draining()) co_return;
    std::lock_guard lock(mutex_);
    std::vector<HealingAction> actions = healing_.engine().evaluate(std::chrono::steady_clock::now(), sample);
    if (actions.empty()) continue;
    // The audit path of the config as loaded, so a new path applies at once.
    healing_.apply(actions, base_config_->healing.audit_log, generation_.load() + 1);
    if (auto err = publish(nullptr, "healing")) log::error("self-healing: cannot publish the change", {{"error", *err}});
  }
}

asio::awaitable<HealthSample> Gateway::collectHealth() {
  HealthSample sample;
  for (auto& worker : workers_) {
    Worker* w = worker.get();
    HealthSample part = co_await asio::co_spawn(w->io(), workerHealth(w), asio::use_awaitable);
    for (const auto& [key, c] : part) {
      HealthCounters& into = sample[key];
      into.requests += c.requests;
      into.failures += c.failures;
      for (std::size_t i = 0; i < into.ttft.size(); ++i) into.ttft[i] += c.ttft[i];
    }
  }
  co_return sample;
}

}  // namespace tahua
