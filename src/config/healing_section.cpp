// healing: rules that shift traffic to fallbacks or eject deployments when a metric
// stays above a threshold.
#include <set>

#include "config/loader_detail.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kHealingFields[] = {
    duration("interval", 10, "10s", "How often the rules are evaluated; each window is the requests since the last."),
    nonEmpty("audit_log", "", "A JSON-lines file every action and undo is appended to; absent: the log and the admin view only."),
    list("rules", "[]", "The rules, each acting on its own and undoing what it did once the trouble is over."),
};
const Table kHealing("healing", "Self-healing rules over live metrics (README \"Self-healing rules\").", kHealingFields);

constexpr Field kHealRuleFields[] = {
    nonEmpty("name", "", "Unique; names the rule in audit records and metrics.").needed(),
    nonEmpty("model", "", "The model the rule watches.").needed(),
    nonEmpty("deployment", "",
             "eject: a deployment id, or \"*\" for each one (required); shift_to_fallback and scale watch the whole "
             "model: omit it."),
    section("when", "The condition: a metric above a threshold in every window for a while.").needed(),
    choice("action", "shift_to_fallback | eject | scale", "",
           "eject: the deployment gets no traffic (never the model's last serving one); shift_to_fallback: `percent` of "
           "the model's traffic goes to its first fallback; scale: a Kubernetes Deployment gets more replicas.")
        .needed(),
    number("percent", 100, "100", "shift_to_fallback: the share of the model's traffic moved (more than 0).", "a percentage"),
    section("scale", "scale (required there): the Kubernetes Deployment patched, in `kubernetes.namespace`."),
    duration("restore_after", 0, "10m", "The action is undone once the target had no bad window for this long."),
};
const Table kHealRule("healing.rules[]", "A rule: when its condition holds, its action is taken, and undone later; every "
                  "action and undo is an audit record.",
                  kHealRuleFields);

constexpr Field kHealWhenFields[] = {
    choice("metric", "ttft_p99 | error_rate | gpu_memory | gpu_util | queued_requests", "",
           "ttft_p99: the 99th percentile of time to first byte; error_rate: percent of calls failed (5xx, connect "
           "errors, timeouts); gpu_memory, gpu_util, queued_requests: the largest over the watched nodes' live status "
           "reports.")
        .needed(),
    any("above", "",
        "The threshold. ttft_p99: a duration (2s); error_rate, gpu_memory, gpu_util: a percentage below 100; "
        "queued_requests: a count.")
        .needed(),
    duration("for", 0, "1m", "The condition must hold in every window this long (a good or thin window starts over)."),
    integer("min_requests", 1, 1'000'000, "10",
            "A window with fewer requests has no verdict; not with a metric from the nodes' reports."),
};
const Table kHealWhen("healing.rules[].when", "A rule's condition.", kHealWhenFields);

constexpr Field kScaleFields[] = {
    nonEmpty("deployment", "", "The Kubernetes Deployment serving the model.").needed(),
    integer("replicas", 1, 1'000, "", "The replicas asked for (never fewer than it has; within min..max).").needed(),
    integer("min", 0, 1'000, "1", "The fewest replicas the rule sets."),
    integer("max", 1, 1'000, "10", "The most replicas the rule sets. Default: 10, or replicas when more."),
    duration("cooldown", 0, "5m", "Two patches by the rule are at least this far apart."),
};
const Table kScale("healing.rules[].scale",
                   "The scale action: the Deployment's `/scale` set to `replicas`, and back to what it had when undone. "
                   "Needs the `kubernetes` section and RBAC `get, patch` on `deployments/scale`.",
                   kScaleFields);

}  // namespace

constexpr Named<HealingRuleConfig::Metric> kHealingMetrics[] = {
    {HealingRuleConfig::Metric::TtftP99, "ttft_p99"},     {HealingRuleConfig::Metric::ErrorRate, "error_rate"},
    {HealingRuleConfig::Metric::GpuMemory, "gpu_memory"}, {HealingRuleConfig::Metric::GpuUtil, "gpu_util"},
    {HealingRuleConfig::Metric::QueuedRequests, "queued_requests"},
};
constexpr Named<HealingRuleConfig::Action> kHealingActions[] = {
    {HealingRuleConfig::Action::ShiftToFallback, "shift_to_fallback"}, {HealingRuleConfig::Action::Eject, "eject"},
    {HealingRuleConfig::Action::Scale, "scale"},
};
static_assert(sameChoices(kHealingMetrics, fieldNamed(kHealWhenFields, "metric").bound));
static_assert(sameChoices(kHealingActions, fieldNamed(kHealRuleFields, "action").bound));

void Loader::loadHealing(const YAML::Node& n, Config& cfg) {
  Fields f(*this, n, "healing", kHealing);
  HealingConfig& h = cfg.healing;
  f.read("interval", h.interval);
  f.read("audit_log", h.audit_log);
  auto rules = f["rules"];
  if (!rules) return;
  if (!rules.IsSequence()) fail(rules, f.at("rules"), "expected a list");
  std::set<std::string> names;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const std::string rp = f.at("rules") + "[" + std::to_string(i) + "]";
    const YAML::Node& y = rules[i];
    Fields rf(*this, y, rp, kHealRule);
    HealingRuleConfig r;
    if (!y["name"]) fail(y, rp + ".name", "required: names the rule in audit records and metrics");
    rf.read("name", r.name);
    if (!names.insert(r.name).second) fail(y["name"], rp + ".name", "duplicate rule name \"" + r.name + "\"");
    if (!y["model"]) fail(y, rp + ".model", "required: the model the rule watches");
    rf.read("model", r.model);
    const ModelConfig* model = cfg.findModel(r.model);
    if (!model) fail(y["model"], rp + ".model", "unknown model \"" + r.model + "\"");
    if (rf.read("deployment", r.deployment)) {
      bool known = r.deployment == "*";
      for (const auto& d : model->deployments) known = known || d.id == r.deployment;
      if (!known)
        fail(y["deployment"], rp + ".deployment", "model \"" + r.model + "\" has no deployment \"" + r.deployment + "\" (or use \"*\")");
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
    if (auto v = rf["percent"]) {
      r.percent = number(v, rp + ".percent", "a percentage");
      if (r.percent <= 0 || r.percent > 100) fail(v, rp + ".percent", "must be more than 0 and at most 100");
    }
    auto w = rf["when"];
    if (!w) fail(y, rp + ".when", "required: {metric, above, for}");
    Fields wf(*this, w, rf.at("when"), kHealWhen);
    const std::string wp = wf.path();
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
    wf.read("for", r.for_);
    if (r.nodeMetric() && w["min_requests"])
      fail(w["min_requests"], wp + ".min_requests", "not with a metric from the nodes' status reports");
    wf.read("min_requests", r.min_requests);
    rf.read("restore_after", r.restore_after);
    h.rules.push_back(std::move(r));
  }
}

HealingRuleConfig::Scale Loader::scaleSpec(const YAML::Node& y, const std::string& p) {
  if (!y.IsMap()) fail(y, p, "expected {deployment, replicas, min, max, cooldown}");
  Fields f(*this, y, p, kScale);
  HealingRuleConfig::Scale s;
  if (!y["deployment"]) fail(y, p + ".deployment", "required: the Kubernetes Deployment serving the model");
  f.read("deployment", s.deployment);
  if (!y["replicas"]) fail(y, p + ".replicas", "required: how many replicas the rule asks for");
  f.read("replicas", s.replicas);
  f.read("min", s.min);
  if (!f.read("max", s.max)) s.max = std::max(s.max, s.replicas);
  if (s.min > s.max) fail(y["min"], p + ".min", "above max (" + std::to_string(s.max) + ")");
  if (s.replicas < s.min || s.replicas > s.max)
    fail(y["replicas"], p + ".replicas", "outside min..max (" + std::to_string(s.min) + ".." + std::to_string(s.max) + ")");
  f.read("cooldown", s.cooldown);
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
