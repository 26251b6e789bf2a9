// The self-healing loop: every healing.interval, the workers' deployment counters go to
// the rules (HealingState's engine), and the actions they decide are put in force by
// publishing the config again. Runs on one worker's event loop.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "healing/healing_engine.h"
#include "healing/healing_state.h"

namespace tahua {

// What the loop needs from the gateway. "Locked": the caller holds lock(), the
// gateway's control mutex (reloads, the admin API and self-healing all publish).
class HealingHost {
 public:
  virtual std::mutex& lock() = 0;
  virtual bool draining() const = 0;
  // Locked. The config as loaded, before any override, and the one being served.
  virtual const ConfigPtr& baseConfig() const = 0;
  virtual const Config& servedConfig() const = 0;
  virtual std::uint64_t generation() const = 0;
  // Locked. Publishes the current config again with every override applied.
  virtual std::optional<std::string> publish(ConfigPtr loaded, std::string_view trigger) = 0;
  // Every worker's deployment counters, summed, with each deployment's node gauges.
  virtual boost::asio::awaitable<HealthSample> collectHealth() = 0;
  // Carries out a scale action (patches the Kubernetes Deployment's replicas): fills
  // its replicas_from / replicas_to, or its error. Not locked.
  virtual boost::asio::awaitable<void> scale(HealingAction& action) = 0;

 protected:
  ~HealingHost() = default;
};

// Returns when the gateway drains. `state` is read and changed under host.lock().
boost::asio::awaitable<void> runHealingLoop(HealingState& state, HealingHost& host);

}  // namespace tahua
