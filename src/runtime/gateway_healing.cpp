// The gateway's side of self-healing: the evaluation loop, applying an action (a config
// re-published with the change), and the audit trail (log line, optional JSON-lines
// file, the last records in the admin view, counts in metrics). The decisions themselves
// are in src/healing/healing_engine.cpp.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <cstdio>

#include "core/log.h"
#include "runtime/gateway.h"
#include "runtime/worker.h"
#include "telemetry/metrics.h"

namespace tahua {

namespace asio = boost::asio;
namespace bj = boost::json;

namespace {
constexpr std::size_t kAuditKept = 256;  // records in the admin view

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
      any = !healing_.targets().empty();
    }
    timer.expires_after(interval);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec || draining()) co_return;
    if (!any) continue;
    HealthSample sample = co_await collectHealth();
    if (draining()) co_return;
    std::lock_guard lock(mutex_);
    std::vector<HealingAction> actions = healing_.evaluate(std::chrono::steady_clock::now(), sample);
    if (actions.empty()) continue;
    applyHealing(actions);
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

void Gateway::applyHealing(const std::vector<HealingAction>& actions) {
  // The config as loaded (a reload sets it before calling this), so a new path applies at once.
  const std::string& audit_path = base_config_->healing.audit_log;
  for (const HealingAction& a : actions) {
    const bool eject = a.action == HealingRuleConfig::Action::Eject;
    if (eject) {
      if (a.fire) healing_ejected_.insert({a.model, a.deployment});
      else healing_ejected_.erase({a.model, a.deployment});
    } else {
      if (a.fire) healing_shift_[a.model] = a.percent;
      else healing_shift_.erase(a.model);
    }
    const std::string action = a.fire ? std::string(healingActionName(a.action)) : "restore";
    ++healing_actions_[{a.rule, action}];
    bj::object record{{"ts", log::nowRfc3339()},
                      {"rule", a.rule},
                      {"action", action},
                      {"model", a.model},
                      {"metric", healingMetricName(a.metric)},
                      {"value", a.value},
                      {"threshold", a.threshold},
                      {"reason", a.reason},
                      {"generation", generation_.load() + 1}};  // the config that carries it
    if (!a.deployment.empty()) record["deployment"] = a.deployment;
    if (!eject && a.fire) record["percent"] = a.percent;
    if (!a.fire) record["undoes"] = healingActionName(a.action);
    std::string line = bj::serialize(record);
    log::warn("self-healing", record);
    if (!audit_path.empty()) {
      if (std::FILE* f = std::fopen(audit_path.c_str(), "a")) {
        std::fprintf(f, "%s\n", line.c_str());
        std::fclose(f);
      } else {
        log::error("self-healing: cannot append to healing.audit_log", {{"path", audit_path}});
      }
    }
    healing_audit_.push_back(std::move(line));
    if (healing_audit_.size() > kAuditKept) healing_audit_.pop_front();
  }
}

void Gateway::applyHealingOverrides(Config& cfg) const {
  for (auto& m : cfg.models) {
    if (auto it = healing_shift_.find(m.name); it != healing_shift_.end() && !m.fallback_indices.empty())
      m.shift_percent = it->second;
    bool changed = false;
    for (auto& d : m.deployments)
      if (d.weight != 0 && healing_ejected_.count({m.name, d.id})) {
        d.weight = 0;  // out of selection (an explicit version pin still reaches it)
        changed = true;
      }
    if (changed) markCanaryDeployments(m);
  }
}

std::string Gateway::healingMetrics() {
  std::lock_guard lock(mutex_);
  std::string text;
  text += "# HELP tahua_healing_actions_total Self-healing actions taken and undone (action restore), by rule.\n";
  text += "# TYPE tahua_healing_actions_total counter\n";
  for (const auto& [key, n] : healing_actions_)
    text += "tahua_healing_actions_total{rule=\"" + escapeLabel(key.first) + "\",action=\"" + key.second + "\"} " +
            std::to_string(n) + "\n";
  text += "# HELP tahua_healing_active Self-healing actions in force (1), by rule and target.\n";
  text += "# TYPE tahua_healing_active gauge\n";
  for (const auto& t : healing_.targets())
    text += "tahua_healing_active{rule=\"" + escapeLabel(healing_.rules()[t.rule].name) + "\",model=\"" + escapeLabel(t.model) +
            "\",deployment=\"" + escapeLabel(t.deployment) + "\"} " + (t.active ? "1" : "0") + "\n";
  return text;
}

std::string Gateway::healingJson() {
  std::lock_guard lock(mutex_);
  const Config& cfg = *snapshot_->config;
  bj::array rules;
  for (const auto& r : healing_.rules()) {
    bj::object o{{"name", r.name},
                 {"model", r.model},
                 {"metric", healingMetricName(r.metric)},
                 {"above", r.above},
                 {"for_ms", r.for_.count()},
                 {"min_requests", r.min_requests},
                 {"action", healingActionName(r.action)},
                 {"restore_after_ms", r.restore_after.count()}};
    if (!r.deployment.empty()) o["deployment"] = r.deployment;
    if (r.action == HealingRuleConfig::Action::ShiftToFallback) o["percent"] = r.percent;
    rules.push_back(std::move(o));
  }
  const auto now = std::chrono::steady_clock::now();
  const auto ms = [&](const std::optional<HealingEngine::Time>& since) -> bj::value {
    if (!since) return nullptr;
    return std::chrono::duration_cast<std::chrono::milliseconds>(now - *since).count();
  };
  bj::array targets;
  for (const auto& t : healing_.targets()) {
    bj::object o{{"rule", healing_.rules()[t.rule].name},
                 {"model", t.model},
                 {"active", t.active},
                 {"blocked", t.blocked},
                 {"window_requests", t.window_requests},
                 {"bad_for_ms", ms(t.bad_since)},
                 {"healthy_for_ms", ms(t.healthy_since)}};
    if (!t.deployment.empty()) o["deployment"] = t.deployment;
    if (t.value) o["value"] = *t.value;
    else o["value"] = nullptr;
    targets.push_back(std::move(o));
  }
  bj::array audit;
  for (const auto& line : healing_audit_) audit.push_back(bj::parse(line));
  return bj::serialize(bj::object{{"interval_ms", cfg.healing.interval.count()},
                                  {"rules", std::move(rules)},
                                  {"targets", std::move(targets)},
                                  {"audit", std::move(audit)}});
}

}  // namespace tahua
