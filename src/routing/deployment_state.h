// What one worker has observed of one deployment: load, latency, ejection, its circuit
// breaker and time-to-first-byte buckets. Read by the balancer, written by the balancer
// and circuit-breaker filters, collected by self-healing; only that worker's thread
// touches it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

namespace tahua {

using SteadyClock = std::chrono::steady_clock;

// One deployment's circuit breaker on one worker: the outcomes of its last calls and
// its state (judged by the circuit_breaker filter; an open one takes the deployment out
// of selection).
struct Breaker {
  enum class State { Closed, Open, HalfOpen };
  State state = State::Closed;
  std::deque<std::uint8_t> window;  // per call: bit 0 failed, bit 1 slow
  std::deque<SteadyClock::time_point> times;  // when each call ended (time-based window only)
  SteadyClock::time_point open_until{};
  int probes_in_flight = 0;
  int probes_succeeded = 0;
};

// Upper bounds (ms) of the time-to-first-byte buckets each deployment counts (the last
// bucket, past them, is +Inf); self-healing rules read percentiles from them.
inline constexpr std::array<double, 16> kTtftBoundsMs = {5,    10,   25,    50,    100,   250,    500,    1000,
                                                         2500, 5000, 10000, 20000, 30000, 60000, 120000, 300000};

// What one worker has observed of one deployment. Only that worker's thread touches it.
struct DeploymentState {
  // Read by every decision first (one cache line with the next few).
  SteadyClock::time_point ejected_until{};
  SteadyClock::time_point throttled_until{};  // the provider said 429 + Retry-After
  double throttle = 1;               // < 1 when the provider reports its limit nearly used
  std::uint32_t outstanding = 0;     // requests in flight
  std::uint32_t consecutive_failures = 0;
  double ewma_ms = 0;                // peak-EWMA of time to first byte
  std::int64_t rr_current = 0;       // smooth weighted round robin
  bool has_latency = false;
  SteadyClock::time_point ewma_at{};
  std::uint32_t ejections = 0;       // in a row; the back-off doubles with each
  std::uint64_t requests = 0;
  std::uint64_t failures = 0;
  // The current error-rate window (outlier.interval): its start and counts.
  SteadyClock::time_point window_start{};
  std::uint32_t window_requests = 0;
  std::uint32_t window_failures = 0;
  Breaker breaker;
  std::array<std::uint64_t, kTtftBoundsMs.size() + 1> ttft_buckets{};  // successful calls, cumulative
};

// One deployment as the operator sees it across the workers. The admin view
// (GET /admin/v1/deployments) and the tahua_deployment_state metric both read it from
// here, so that they cannot disagree.
struct DeploymentSummary {
  std::uint64_t breakers_closed = 0, breakers_open = 0, breakers_half_open = 0;
  std::uint64_t outstanding = 0, requests = 0, failures = 0;
  double ewma_ms = 0;   // the slowest worker's
  double throttle = 1;  // the lowest worker's
  bool ejected = false;    // by outlier detection, on some worker
  bool throttled = false;  // 429 + Retry-After, on some worker
  // One word: what keeps it from traffic, if anything (`ejected_by_healing`: a
  // self-healing rule took it out, which the workers' states do not show).
  const char* state(bool ejected_by_healing) const {
    return breakers_open > 0 ? "breaker_open" : ejected || ejected_by_healing ? "ejected" : throttled ? "throttled" : "active";
  }
};

inline DeploymentSummary summarizeDeployment(const std::vector<std::vector<DeploymentState>>& per_worker, std::size_t index,
                                             SteadyClock::time_point now) {
  DeploymentSummary sum;
  for (const auto& states : per_worker) {
    const DeploymentState& s = states[index];
    // An open breaker past its open_for becomes half-open at the next call: say so now.
    if (s.breaker.state == Breaker::State::Open && s.breaker.open_until > now) ++sum.breakers_open;
    else if (s.breaker.state == Breaker::State::Closed) ++sum.breakers_closed;
    else ++sum.breakers_half_open;
    sum.outstanding += s.outstanding;
    sum.requests += s.requests;
    sum.failures += s.failures;
    if (s.has_latency && s.ewma_ms > sum.ewma_ms) sum.ewma_ms = s.ewma_ms;
    sum.ejected = sum.ejected || s.ejected_until > now;
    sum.throttled = sum.throttled || s.throttled_until > now;
    if (s.throttle < sum.throttle) sum.throttle = s.throttle;
  }
  return sum;
}

}  // namespace tahua
