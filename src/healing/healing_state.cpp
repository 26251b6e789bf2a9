#include "healing/healing_state.h"

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>

#include "core/log.h"
#include "telemetry/metrics.h"

namespace tahua {

namespace bj = boost::json;

namespace {
constexpr std::size_t kAuditKept = 256;  // records in the admin view
}  // namespace

void HealingState::configure(const Config& config, std::uint64_t next_generation) {
  apply(engine_.configure(config.healing, config), config.healing.audit_log, next_generation);
}

void HealingState::apply(const std::vector<HealingAction>& actions, const std::string& audit_path, std::uint64_t generation) {
  for (const HealingAction& a : actions) {
    const bool eject = a.action == HealingRuleConfig::Action::Eject;
    const bool scale = a.action == HealingRuleConfig::Action::Scale;  // carried out by the caller, only audited here
    if (eject) {
      if (a.fire) ejected_.insert({a.model, a.deployment});
      else ejected_.erase({a.model, a.deployment});
    } else if (!scale) {
      if (a.fire) shift_[a.model] = a.percent;
      else shift_.erase(a.model);
    }
    const std::string action = a.fire ? std::string(healingActionName(a.action)) : "restore";
    ++actions_[{a.rule, action}];
    bj::object record{{"ts", a.decided_at.empty() ? log::nowRfc3339() : a.decided_at},
                      {"rule", a.rule},
                      {"action", action},
                      {"model", a.model},
                      {"metric", healingMetricName(a.metric)},
                      {"value", a.value},
                      {"threshold", a.threshold},
                      {"reason", a.reason},
                      {"generation", generation}};  // the config that carries it
    if (!a.deployment.empty()) record["deployment"] = a.deployment;
    if (a.action == HealingRuleConfig::Action::ShiftToFallback && a.fire) record["percent"] = a.percent;
    if (scale) {
      record["kubernetes_deployment"] = a.scale.deployment;
      if (a.replicas_from) record["replicas_from"] = *a.replicas_from;
      if (a.replicas_to) record["replicas_to"] = *a.replicas_to;
      if (!a.error.empty()) record["error"] = a.error;
    }
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
    audit_.push_back(std::move(line));
    if (audit_.size() > kAuditKept) audit_.pop_front();
  }
}

void HealingState::applyOverrides(Config& cfg) const {
  for (auto& m : cfg.models) {
    if (auto it = shift_.find(m.name); it != shift_.end() && !m.fallback_indices.empty())
      m.shift_percent = it->second;
    bool changed = false;
    for (auto& d : m.deployments)
      if (d.weight != 0 && ejected_.count({m.name, d.id})) {
        d.weight = 0;  // out of selection (an explicit version pin still reaches it)
        changed = true;
      }
    if (changed) markCanaryDeployments(m);
  }
}

std::string HealingState::metricsText() const {
  std::string text;
  text += "# HELP tahua_healing_actions_total Self-healing actions taken and undone (action restore), by rule.\n";
  text += "# TYPE tahua_healing_actions_total counter\n";
  for (const auto& [key, n] : actions_)
    text += "tahua_healing_actions_total{rule=\"" + escapeLabel(key.first) + "\",action=\"" + key.second + "\"} " +
            std::to_string(n) + "\n";
  text += "# HELP tahua_healing_active Self-healing actions in force (1), by rule and target.\n";
  text += "# TYPE tahua_healing_active gauge\n";
  for (const auto& t : engine_.targets())
    text += "tahua_healing_active{rule=\"" + escapeLabel(engine_.rules()[t.rule].name) + "\",model=\"" + escapeLabel(t.model) +
            "\",deployment=\"" + escapeLabel(t.deployment) + "\"} " + (t.active ? "1" : "0") + "\n";
  return text;
}

std::string HealingState::json(const Config& cfg) const {
  bj::array rules;
  for (const auto& r : engine_.rules()) {
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
    if (r.action == HealingRuleConfig::Action::Scale)
      o["scale"] = bj::object{{"deployment", r.scale.deployment}, {"replicas", r.scale.replicas}, {"min", r.scale.min},
                              {"max", r.scale.max}, {"cooldown_ms", r.scale.cooldown.count()}};
    if (r.nodeMetric()) o.erase("min_requests");
    rules.push_back(std::move(o));
  }
  const auto now = std::chrono::steady_clock::now();
  const auto ms = [&](const std::optional<HealingEngine::Time>& since) -> bj::value {
    if (!since) return nullptr;
    return std::chrono::duration_cast<std::chrono::milliseconds>(now - *since).count();
  };
  bj::array targets;
  for (const auto& t : engine_.targets()) {
    bj::object o{{"rule", engine_.rules()[t.rule].name},
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
  for (const auto& line : audit_) audit.push_back(bj::parse(line));
  return bj::serialize(bj::object{{"interval_ms", cfg.healing.interval.count()},
                                  {"rules", std::move(rules)},
                                  {"targets", std::move(targets)},
                                  {"audit", std::move(audit)}});
}

}  // namespace tahua
