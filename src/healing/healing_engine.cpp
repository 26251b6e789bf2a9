#include "healing/healing_engine.h"

#include <algorithm>

namespace tahua {

std::optional<double> percentileMs(const std::array<std::uint64_t, kTtftBoundsMs.size() + 1>& buckets, double p) {
  std::uint64_t total = 0;
  for (auto n : buckets) total += n;
  if (total == 0) return std::nullopt;
  const double rank = p * static_cast<double>(total);
  std::uint64_t below = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i] == 0 || static_cast<double>(below + buckets[i]) < rank) {
      below += buckets[i];
      continue;
    }
    if (i == kTtftBoundsMs.size()) return kTtftBoundsMs.back();  // past the last bound: its value
    const double lo = i == 0 ? 0 : kTtftBoundsMs[i - 1];
    const double hi = kTtftBoundsMs[i];
    return lo + (hi - lo) * (rank - static_cast<double>(below)) / static_cast<double>(buckets[i]);
  }
  return kTtftBoundsMs.back();
}

namespace {

bool sameRule(const HealingRuleConfig& a, const HealingRuleConfig& b) {
  return a.name == b.name && a.model == b.model && a.deployment == b.deployment && a.metric == b.metric &&
         a.above == b.above && a.for_ == b.for_ && a.min_requests == b.min_requests && a.action == b.action &&
         a.percent == b.percent && a.restore_after == b.restore_after && a.scale == b.scale;
}

void subtract(HealthCounters& into, const HealthCounters& now, const HealthCounters* before) {
  // A deployment state may be new (reload) or reset: never a negative window.
  const auto diff = [](std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; };
  into.requests += diff(now.requests, before ? before->requests : 0);
  into.failures += diff(now.failures, before ? before->failures : 0);
  for (std::size_t i = 0; i < into.ttft.size(); ++i) into.ttft[i] += diff(now.ttft[i], before ? before->ttft[i] : 0);
}

}  // namespace

std::vector<HealingAction> HealingEngine::configure(const HealingConfig& healing, const Config& config) {
  std::vector<Target> next;
  for (std::size_t r = 0; r < healing.rules.size(); ++r) {
    const HealingRuleConfig& rule = healing.rules[r];
    const ModelConfig* model = config.findModel(rule.model);
    if (!model) continue;  // the loader rejects this; be safe for hand-built configs
    const auto add = [&](const std::string& deployment) {
      Target t;
      t.rule = r;
      t.model = rule.model;
      t.deployment = deployment;
      next.push_back(std::move(t));
    };
    if (rule.action != HealingRuleConfig::Action::Eject) {
      add("");
    } else {
      for (const auto& d : model->deployments)
        if (rule.deployment == "*" || rule.deployment == d.id) add(d.id);
    }
  }
  // Keep the state of targets whose rule did not change.
  std::vector<bool> kept(targets_.size(), false);
  for (Target& t : next) {
    const HealingRuleConfig& rule = healing.rules[t.rule];
    for (std::size_t i = 0; i < targets_.size(); ++i) {
      const Target& old = targets_[i];
      if (kept[i] || old.model != t.model || old.deployment != t.deployment || !sameRule(rules_[old.rule], rule)) continue;
      const std::size_t index = t.rule;
      t = old;
      t.rule = index;
      kept[i] = true;
      break;
    }
  }
  std::vector<HealingAction> undone;
  for (std::size_t i = 0; i < targets_.size(); ++i)
    if (targets_[i].active && !kept[i]) undone.push_back(actionFor(targets_[i], false, 0, "the rule was removed or changed"));
  rules_ = healing.rules;
  targets_ = std::move(next);
  deployments_per_model_.clear();
  for (const auto& m : config.models) deployments_per_model_[m.name] = m.deployments.size();
  return undone;
}

HealthCounters HealingEngine::window(const Target& t, const HealthSample& sample) const {
  HealthCounters w;
  for (const auto& [key, now] : sample) {
    if (key.first != t.model || (!t.deployment.empty() && key.second != t.deployment)) continue;
    auto it = previous_.find(key);
    subtract(w, now, it == previous_.end() ? nullptr : &it->second);
  }
  return w;
}

std::optional<double> HealingEngine::nodeValue(const Target& t, const HealthSample& sample) const {
  const HealingRuleConfig& rule = rules_[t.rule];
  std::optional<double> value;
  for (const auto& [key, now] : sample) {
    if (key.first != t.model || (!t.deployment.empty() && key.second != t.deployment) || !now.node) continue;
    const double v = rule.metric == HealingRuleConfig::Metric::GpuMemory ? now.node->gpu_memory
                     : rule.metric == HealingRuleConfig::Metric::GpuUtil ? now.node->gpu_util
                                                                         : now.node->queued_requests;
    value = std::max(value.value_or(v), v);
  }
  return value;
}

HealingAction HealingEngine::actionFor(const Target& t, bool fire, double value, std::string reason) const {
  const HealingRuleConfig& rule = rules_[t.rule];
  HealingAction a;
  a.fire = fire;
  a.rule = rule.name;
  a.action = rule.action;
  a.percent = rule.percent;
  a.model = t.model;
  a.deployment = t.deployment;
  a.metric = rule.metric;
  a.value = value;
  a.threshold = rule.above;
  a.reason = std::move(reason);
  a.scale = rule.scale;
  return a;
}

std::vector<HealingAction> HealingEngine::evaluate(Time now, const HealthSample& sample) {
  std::vector<HealingAction> out;
  if (!previous_at_) {
    previous_ = sample;
    previous_at_ = now;
    return out;
  }
  const Time window_start = *previous_at_;
  for (Target& t : targets_) {
    const HealingRuleConfig& rule = rules_[t.rule];
    const HealthCounters w = window(t, sample);
    t.window_requests = w.requests;
    // The verdict of this window: bad, good, or none (too few requests).
    std::optional<bool> bad;
    if (rule.nodeMetric()) {
      if (auto value = nodeValue(t, sample)) {
        t.value = *value;
        bad = *value > rule.above;
      }
    } else if (w.requests >= static_cast<std::uint64_t>(rule.min_requests)) {
      std::optional<double> value;
      if (rule.metric == HealingRuleConfig::Metric::ErrorRate)
        value = 100.0 * static_cast<double>(w.failures) / static_cast<double>(w.requests);
      else
        value = percentileMs(w.ttft, 0.99);
      if (value) {
        t.value = *value;
        bad = *value > rule.above;
      }
    }
    // A Deployment is not patched twice within the cool-down: the decision waits.
    const bool cooling = rule.action == HealingRuleConfig::Action::Scale && t.acted_at && now - *t.acted_at < rule.scale.cooldown;
    if (!t.active) {
      t.healthy_since.reset();
      if (!bad.value_or(false)) {
        // A good window, or one without a verdict, ends a bad run.
        t.bad_since.reset();
        t.blocked = false;
        continue;
      }
      if (!t.bad_since) t.bad_since = window_start;
      if (now - *t.bad_since < rule.for_ || cooling) continue;
      if (rule.action == HealingRuleConfig::Action::Eject) {
        // Never the last deployment of a model: something must keep serving.
        std::size_t ejected = 0;
        for (const Target& o : targets_)
          if (o.active && o.model == t.model && !o.deployment.empty() && rules_[o.rule].action == HealingRuleConfig::Action::Eject)
            ++ejected;
        const auto total = deployments_per_model_[t.model];
        if (ejected + 1 >= total) {
          t.blocked = true;
          continue;
        }
      }
      t.active = true;
      t.blocked = false;
      t.bad_since.reset();
      if (rule.action == HealingRuleConfig::Action::Scale) t.acted_at = now;
      out.push_back(actionFor(t, true, *t.value, std::string(healingMetricName(rule.metric)) + " over threshold"));
    } else {
      // While active: healthy or idle windows (an ejected deployment gets no traffic)
      // count towards the restore; a bad one starts it over.
      if (bad.value_or(false)) {
        t.healthy_since.reset();
        continue;
      }
      if (!t.healthy_since) t.healthy_since = window_start;
      if (now - *t.healthy_since < rule.restore_after || cooling) continue;
      t.active = false;
      t.healthy_since.reset();
      if (rule.action == HealingRuleConfig::Action::Scale) t.acted_at = now;
      out.push_back(actionFor(t, false, t.value.value_or(0),
                              bad.has_value() ? "healthy for restore_after" : "restore_after passed without a bad window"));
    }
  }
  previous_ = sample;
  previous_at_ = now;
  return out;
}

}  // namespace tahua
