#include "healing/healing_loop.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

#include "core/log.h"

namespace tahua {

namespace asio = boost::asio;

asio::awaitable<void> runHealingLoop(HealingState& state, HealingHost& host) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    Millis interval;
    bool any = false;
    {
      std::lock_guard lock(host.lock());
      interval = host.servedConfig().healing.interval;
      any = !state.engine().targets().empty();
    }
    timer.expires_after(interval);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec || host.draining()) co_return;
    if (!any) continue;
    HealthSample sample = co_await host.collectHealth();
    if (host.draining()) co_return;
    std::vector<HealingAction> actions;
    // The two clocks read together: the audit's times are as far apart as the
    // engine's (the cool-down is measured on the steady one).
    const auto now = std::chrono::steady_clock::now();
    const std::string decided_at = log::nowRfc3339();
    {
      std::lock_guard lock(host.lock());
      actions = state.engine().evaluate(now, sample);
    }
    if (actions.empty()) continue;
    for (HealingAction& a : actions) a.decided_at = decided_at;
    // Scale actions act on the cluster, outside the lock; their audit records say how it went.
    bool republish = false;
    for (HealingAction& a : actions) {
      if (a.action == HealingRuleConfig::Action::Scale) co_await host.scale(a);
      else republish = true;
    }
    std::lock_guard lock(host.lock());
    // The audit path of the config as loaded, so a new path applies at once.
    state.apply(actions, host.baseConfig()->healing.audit_log, host.generation() + (republish ? 1 : 0));
    if (!republish) continue;
    if (auto err = host.publish(nullptr, "healing")) log::error("self-healing: cannot publish the change", {{"error", *err}});
  }
}

}  // namespace tahua
