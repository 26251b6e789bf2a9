// What self-healing keeps between evaluations: the engine (rules and targets), the
// overrides its actions put in force (ejected deployments, traffic shifted to a
// fallback), and the audit trail (the last records, counts by rule and action). The
// gateway keeps one under its control mutex; the loop that feeds it the workers'
// counters and re-publishes the config is src/healing/healing_loop.cpp.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "healing/healing_engine.h"

namespace tahua {

class HealingState {
 public:
  HealingEngine& engine() { return engine_; }
  const HealingEngine& engine() const { return engine_; }

  // Takes the rules of a (re)loaded config; rules that are gone or changed are undone.
  void configure(const Config& config, std::uint64_t next_generation);
  // Puts actions in force (or undoes them) and audits each: a log line, a line in
  // `audit_path` if set, the admin view's record. `generation`: the config that will
  // carry them.
  void apply(const std::vector<HealingAction>& actions, const std::string& audit_path, std::uint64_t generation);
  // The overrides in force, applied to a config about to be published.
  void applyOverrides(Config& cfg) const;
  // The deployments an eject action keeps out of selection: (model, deployment).
  const std::set<std::pair<std::string, std::string>>& ejected() const { return ejected_; }

  // Prometheus text: actions taken and undone, actions in force.
  std::string metricsText() const;
  // The admin view (GET /admin/v1/healing).
  std::string json(const Config& config) const;

 private:
  HealingEngine engine_;
  std::set<std::pair<std::string, std::string>> ejected_;  // (model, deployment)
  std::map<std::string, double, std::less<>> shift_;       // model -> percent
  std::deque<std::string> audit_;                          // JSON records, oldest first
  std::map<std::pair<std::string, std::string>, std::uint64_t> actions_;  // (rule, action) -> count
};

}  // namespace tahua
