// healing: rules that shift traffic to fallbacks or eject deployments when a metric
// stays above a threshold.
#include <set>

#include "config/loader_detail.h"

namespace tahua::config_detail {

constexpr Named<HealingRuleConfig::Metric> kHealingMetrics[] = {
    {HealingRuleConfig::Metric::TtftP99, "ttft_p99"},     {HealingRuleConfig::Metric::ErrorRate, "error_rate"},
    {HealingRuleConfig::Metric::GpuMemory, "gpu_memory"}, {HealingRuleConfig::Metric::GpuUtil, "gpu_util"},
    {HealingRuleConfig::Metric::QueuedRequests, "queued_requests"},
};
constexpr Named<HealingRuleConfig::Action> kHealingActions[] = {
    {HealingRuleConfig::Action::ShiftToFallback, "shift_to_fallback"}, {HealingRuleConfig::Action::Eject, "eject"},
    {HealingRuleConfig::Action::Scale, "scale"},
};

void Loader::loadHealing(const YAML::Node& n, Config& cfg) {
  const std::string p = "healing";
  checkKeys(n, p, {"interval", "audit_log", "rules"});
  HealingConfig& h = cfg.healing;
  if (auto v = n["interval"]) h.interval = duration(v, p + ".interval", Millis(10));
  if (auto v = n["audit_log"]) h.audit_log = nonEmpty(v, p + ".audit_log");
  auto rules = n["rules"];
  if (!rules) return;
  if (!rules.IsSequence()) fail(rules, p + ".rules", "expected a list");
  std::set<std::string> names;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const std::string rp = p + ".rules[" + std::to_string(i) + "]";
    const YAML::Node& y = rules[i];
    checkKeys(y, rp, {"name", "model", "deployment", "when", "action", "percent", "scale", "restore_after"});
    HealingRuleConfig r;
    if (!y["name"]) fail(y, rp + ".name", "required: names the rule in audit records and metrics");
    r.name = nonEmpty(y["name"], rp + ".name");
    if (!names.insert(r.name).second) fail(y["name"], rp + ".name", "duplicate rule name \"" + r.name + "\"");
    if (!y["model"]) fail(y, rp + ".model", "required: the model the rule watches");
    r.model = nonEmpty(y["model"], rp + ".model");
    const ModelConfig* model = cfg.findModel(r.model);
    if (!model) fail(y["model"], rp + ".model", "unknown model \"" + r.model + "\"");
    if (auto v = y["deployment"]) {
      r.deployment = nonEmpty(v, rp + ".deployment");
      bool known = r.deployment == "*";
      for (const auto& d : model->deployments) known = known || d.id == r.deployment;
      if (!known) fail(v, rp + ".deployment", "model \"" + r.model + "\" has no deployment \"" + r.deployment + "\" (or use \"*\")");
    }
    const std::string actions = choices(kHealingActions, " or ");
    if (!y["action"]) fail(y, rp + ".action", "required: " + actions);
    const std::string action = str(y["action"], rp + ".action");
    const auto parsed_action = valueOf(kHealingActions, action);
    if (!parsed_action) fail(y["action"], rp + ".action", "expected " + actions + ", got \"" + action + "\"");
    r.action = *parsed_action;
    if (r.action == HealingRuleConfig::Action::Eject) {
      if (r.deployment.empty()) fail(y["action"], rp + ".action", "eject needs `deployment` (an id, or \"*\" for each one)");
    } else if (r.action == HealingRuleConfig::Action::ShiftToFallback) {
      if (!r.deployment.empty()) fail(y["deployment"], rp + ".deployment", "shift_to_fallback watches the whole model; omit deployment");
      if (model->fallbacks.empty()) fail(y["action"], rp + ".action", "model \"" + r.model + "\" has no fallbacks to shift to");
    } else {
      if (!r.deployment.empty()) fail(y["deployment"], rp + ".deployment", "scale watches the whole model; omit deployment");
      if (!y["scale"]) fail(y, rp + ".scale", "required with action scale: {deployment, replicas, min, max, cooldown}");
      r.scale = scaleSpec(y["scale"], rp + ".scale");
    }
    if (y["scale"] && r.action != HealingRuleConfig::Action::Scale) fail(y["scale"], rp + ".scale", "only with action scale");
    if (auto v = y["percent"]) {
      r.percent = number(v, rp + ".percent", "a percentage");
      if (r.percent <= 0 || r.percent > 100) fail(v, rp + ".percent", "must be more than 0 and at most 100");
    }
    auto w = y["when"];
    if (!w) fail(y, rp + ".when", "required: {metric, above, for}");
    const std::string wp = rp + ".when";
    checkKeys(w, wp, {"metric", "above", "for", "min_requests"});
    const std::string metrics = choices(kHealingMetrics, " or ");
    if (!w["metric"]) fail(w, wp + ".metric", "required: " + metrics);
    const std::string metric = str(w["metric"], wp + ".metric");
    if (!w["above"]) fail(w, wp + ".above", "required: the threshold");
    const auto parsed_metric = valueOf(kHealingMetrics, metric);
    if (!parsed_metric) fail(w["metric"], wp + ".metric", "expected " + metrics + ", got \"" + metric + "\"");
    r.metric = *parsed_metric;
    if (r.metric == HealingRuleConfig::Metric::TtftP99) {
      r.above = static_cast<double>(duration(w["above"], wp + ".above", Millis(1)).count());
    } else if (r.metric == HealingRuleConfig::Metric::QueuedRequests) {
      r.above = number(w["above"], wp + ".above", "a count of queued requests");
      if (r.above < 0) fail(w["above"], wp + ".above", "must not be negative");
    } else {
      r.above = number(w["above"], wp + ".above", "a percentage");
      if (r.above >= 100) fail(w["above"], wp + ".above", "must be below 100");
    }
    if (auto v = w["for"]) r.for_ = duration(v, wp + ".for");
    if (r.nodeMetric()) {
      if (w["min_requests"]) fail(w["min_requests"], wp + ".min_requests", "not with a metric from the nodes' status reports");
    }
    if (auto v = w["min_requests"]) r.min_requests = static_cast<int>(integer(v, wp + ".min_requests", 1, 1'000'000));
    if (auto v = y["restore_after"]) r.restore_after = duration(v, rp + ".restore_after");
    h.rules.push_back(std::move(r));
  }
}

HealingRuleConfig::Scale Loader::scaleSpec(const YAML::Node& y, const std::string& p) {
  if (!y.IsMap()) fail(y, p, "expected {deployment, replicas, min, max, cooldown}");
  checkKeys(y, p, {"deployment", "replicas", "min", "max", "cooldown"});
  HealingRuleConfig::Scale s;
  if (!y["deployment"]) fail(y, p + ".deployment", "required: the Kubernetes Deployment serving the model");
  s.deployment = nonEmpty(y["deployment"], p + ".deployment");
  if (!y["replicas"]) fail(y, p + ".replicas", "required: how many replicas the rule asks for");
  s.replicas = static_cast<int>(integer(y["replicas"], p + ".replicas", 1, 1'000));
  if (auto v = y["min"]) s.min = static_cast<int>(integer(v, p + ".min", 0, 1'000));
  if (auto v = y["max"]) s.max = static_cast<int>(integer(v, p + ".max", 1, 1'000));
  else s.max = std::max(s.max, s.replicas);
  if (s.min > s.max) fail(y["min"], p + ".min", "above max (" + std::to_string(s.max) + ")");
  if (s.replicas < s.min || s.replicas > s.max)
    fail(y["replicas"], p + ".replicas", "outside min..max (" + std::to_string(s.min) + ".." + std::to_string(s.max) + ")");
  if (auto v = y["cooldown"]) s.cooldown = duration(v, p + ".cooldown");
  return s;
}

}  // namespace tahua::config_detail

namespace tahua {

std::string_view healingMetricName(HealingRuleConfig::Metric m) {
  return config_detail::nameOf(config_detail::kHealingMetrics, m);
}

std::string_view healingActionName(HealingRuleConfig::Action a) {
  return config_detail::nameOf(config_detail::kHealingActions, a);
}

}  // namespace tahua
