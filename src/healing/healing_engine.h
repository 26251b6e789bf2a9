// Self-healing rules (config `healing`): every interval the gateway collects each
// deployment's counters from the workers and asks the engine what to do. The engine is
// pure state over (time, counters), so its decisions are unit-tested without sockets or
// clocks; the gateway applies the actions (a re-published config) and writes the audit
// records (src/runtime/gateway.cpp).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "routing/balancer.h"

namespace tahua {

// What the deployment's node last reported (percent for the GPU figures), when it is live.
struct NodeGauges {
  double gpu_memory = 0;
  double gpu_util = 0;
  double queued_requests = 0;
};

// Cumulative counters of one deployment, summed over the workers, and its node's gauges.
struct HealthCounters {
  std::uint64_t requests = 0;
  std::uint64_t failures = 0;
  std::array<std::uint64_t, kTtftBoundsMs.size() + 1> ttft{};  // successful calls by time to first byte
  std::optional<NodeGauges> node;  // none: no live report
};
// Keyed by (model, deployment id).
using HealthSample = std::map<std::pair<std::string, std::string>, HealthCounters>;

// The p-th percentile (0..1) of a bucketed distribution, interpolated linearly within
// its bucket (as Prometheus' histogram_quantile); nullopt when empty.
std::optional<double> percentileMs(const std::array<std::uint64_t, kTtftBoundsMs.size() + 1>& buckets, double p);

struct HealingAction {
  bool fire = true;  // false: the action is undone
  std::string rule;
  HealingRuleConfig::Action action = HealingRuleConfig::Action::Eject;
  double percent = 100;     // shift_to_fallback
  std::string model;
  std::string deployment;   // eject: the deployment; shift: empty
  HealingRuleConfig::Metric metric = HealingRuleConfig::Metric::ErrorRate;
  double value = 0;         // the metric in the window that decided (ms or %)
  double threshold = 0;
  std::string reason;
  HealingRuleConfig::Scale scale;  // scale: the Deployment and bounds
  // scale, once carried out: the replicas before and after, or why it failed.
  std::optional<int> replicas_from, replicas_to;
  std::string error;
  // When the loop decided (RFC 3339): the audit record's `ts`. A scale action is
  // recorded after its patch answered, which may take longer than the next one's, so a
  // time taken then would not show the cool-down between decisions.
  std::string decided_at;
};

class HealingEngine {
 public:
  using Time = std::chrono::steady_clock::time_point;

  // What one rule watches: the model (shift) or one deployment (eject; "*" = each).
  struct Target {
    std::size_t rule = 0;  // into rules()
    std::string model;
    std::string deployment;
    bool active = false;   // its action is in force
    bool blocked = false;  // would eject a model's last deployment: held back
    std::optional<double> value;  // the metric in the last window with a verdict
    std::uint64_t window_requests = 0;
    std::optional<Time> bad_since, healthy_since;  // start of the first window of the run
    std::optional<Time> acted_at;  // scale: the last patch (fire or undo), for the cool-down
  };

  // Takes the rules of a (re)loaded config. Targets of unchanged rules keep their state;
  // the active ones of rules that are gone or changed are undone (returned).
  std::vector<HealingAction> configure(const HealingConfig& healing, const Config& config);
  // One evaluation: `sample` holds cumulative counters; the window is the difference to
  // the previous call (the first call only records). Node metrics are read as they are.
  std::vector<HealingAction> evaluate(Time now, const HealthSample& sample);

  const std::vector<HealingRuleConfig>& rules() const { return rules_; }
  const std::vector<Target>& targets() const { return targets_; }

 private:
  HealthCounters window(const Target& t, const HealthSample& sample) const;
  // A node metric now: the largest over the target's deployments with a live report.
  std::optional<double> nodeValue(const Target& t, const HealthSample& sample) const;
  HealingAction actionFor(const Target& t, bool fire, double value, std::string reason) const;

  std::vector<HealingRuleConfig> rules_;
  std::vector<Target> targets_;
  std::map<std::string, std::size_t, std::less<>> deployments_per_model_;
  HealthSample previous_;
  std::optional<Time> previous_at_;
};

}  // namespace tahua
