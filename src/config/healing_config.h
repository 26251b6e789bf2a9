// The `healing` section (healing_section.cpp): self-healing rules over live metrics.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/duration.h"

namespace tahua {

// Self-healing: declarative rules over live metrics, evaluated every `interval`; each
// action (and its undoing) is an audit record (log, admin view, metrics, audit_log file).
struct HealingRuleConfig {
  // gpu_memory, gpu_util (percent) and queued_requests: the largest over the live status
  // reports of the watched deployments' nodes, as they stand (not a window's count).
  enum class Metric { TtftP99, ErrorRate, GpuMemory, GpuUtil, QueuedRequests };
  enum class Action { ShiftToFallback, Eject, Scale };
  // scale: the Kubernetes Deployment (in kubernetes.namespace) serving the model is
  // patched to `replicas` (within min..max) when the rule fires, and back to what it had
  // when it is undone; two patches of it by this rule are `cooldown` apart at least.
  struct Scale {
    std::string deployment;
    int replicas = 0;
    int min = 1;
    int max = 10;
    Millis cooldown{300'000};
    bool operator==(const Scale&) const = default;
  };
  std::string name;
  std::string model;
  std::string deployment;  // eject: a deployment id or "*" (each one); shift, scale: empty (the model)
  Metric metric = Metric::ErrorRate;
  double above = 0;        // ttft_p99: milliseconds; error_rate, gpu_*: percent; queued_requests: a count
  Millis for_{60'000};     // the condition holds this long (every interval of it) → act
  int min_requests = 10;   // an interval with fewer requests has no verdict
  Action action = Action::Eject;
  double percent = 100;    // shift_to_fallback: share of the model's traffic moved
  Millis restore_after{600'000};  // healthy (or idle) this long → undo
  Scale scale;
  // A metric from the nodes' status reports rather than the gateway's own counters.
  bool nodeMetric() const { return metric == Metric::GpuMemory || metric == Metric::GpuUtil || metric == Metric::QueuedRequests; }
};

struct HealingConfig {
  Millis interval{10'000};
  std::string audit_log;   // JSON lines appended per action; empty = log and admin view only
  std::vector<HealingRuleConfig> rules;
};

std::string_view healingMetricName(HealingRuleConfig::Metric m);
std::string_view healingActionName(HealingRuleConfig::Action a);

}  // namespace tahua
