#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>

#include "filters/filter.h"
#include "telemetry/metrics.h"

namespace tahua {

// One provider's breaker on one worker: the outcomes of its last calls and its state.
struct Breaker {
  enum class State { Closed, Open, HalfOpen };
  State state = State::Closed;
  std::deque<std::uint8_t> window;  // per call: bit 0 failed, bit 1 slow
  std::chrono::steady_clock::time_point open_until{};
  int probes_in_flight = 0;
  int probes_succeeded = 0;
};

// Owned by the worker (a reload's new filter chain keeps the breakers' memory).
using BreakerTable = std::unordered_map<std::string, Breaker, StringHash, std::equal_to<>>;

// Fails fast with 503 circuit_open while a provider's breaker is open, lets a few probe
// calls through when half-open, and judges every admitted call in onComplete: an
// upstream error or a 5xx is a failure, a first byte later than slow_call is slow.
// Transitions are logged (the audit trail) and counted per provider.
std::unique_ptr<Filter> makeCircuitBreakerFilter(BreakerTable& breakers, WorkerMetrics& metrics);

}  // namespace tahua
