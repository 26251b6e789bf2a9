// Choosing a deployment for a request: the canary split, then outlier ejection, then the
// model's balancing policy. Pure functions over per-worker state, so every policy's
// distribution is unit-tested with a fixed seed and the cost of one decision is
// measured in bench/micro (goal: well under 1 µs with 100 deployments).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "config/config.h"

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

enum class NodeState { Healthy, Degraded, Overloaded, Unhealthy };
std::string_view nodeStateName(NodeState s);
std::optional<NodeState> parseNodeState(std::string_view s);

// A status report from an inference node (or an agent beside it).
struct NodeStatus {
  double gpu_util = 0;      // 0..1
  double gpu_memory = 0;    // 0..1 of memory used
  double active_connections = 0;
  double queued_requests = 0;
  double avg_latency_ms = 0;
  NodeState state = NodeState::Healthy;
  SteadyClock::time_point reported{};
  std::chrono::system_clock::time_point reported_wall{};  // for the admin view
};

using NodeTable = std::unordered_map<std::string, NodeStatus, StringHash, std::equal_to<>>;
using NodeTablePtr = std::shared_ptr<const NodeTable>;

// Load score (lower is better): the configured weighted sum, times degraded_factor when
// DEGRADED; +inf when UNHEALTHY or OVERLOADED.
double loadScore(const NodeStatus& s, const GpuScoreConfig& c);

// The status that counts for a node now: null when none was reported or it expired.
const NodeStatus* liveStatus(const NodeTable* nodes, std::string_view node, const GpuScoreConfig& c,
                             SteadyClock::time_point now);

struct PickRequest {
  const ModelConfig* model = nullptr;
  std::span<DeploymentState* const> states;  // one per model->deployments, same order
  const NodeTable* nodes = nullptr;
  // Optional: each deployment's node status already looked up in `nodes` (same order as
  // states; null = none). Saves a string lookup per deployment per decision.
  std::span<const NodeStatus* const> node_status;
  SteadyClock::time_point now{};
  std::string_view pin_version;  // X-Tahua-Version / ?modelVersion=
  std::string_view sticky_key;   // user id header value or API key; empty: none
  // DeploymentConfig::index values already tried for this request (retries, failover):
  // avoided like ejected ones, used only when nothing else is left.
  std::span<const std::size_t> exclude;
};

struct PickResult {
  std::size_t index = 0;           // into model->deployments
  std::string_view reason;         // how the version was chosen: pin, allow, sticky, percent, none
  bool fallback_to_stable = false;  // the chosen version had no usable deployment
};

class Balancer {
 public:
  explicit Balancer(std::uint64_t seed) : rng_(seed) {}
  // Always picks one (every deployment of the model may be chosen as a last resort).
  PickResult pick(const PickRequest& request);

  std::mt19937_64& rng() { return rng_; }

 private:
  std::size_t cheaper(const ModelConfig& model, const PickRequest& req, std::size_t a, std::size_t b);

  std::mt19937_64 rng_;
};

// Canary decision alone (precedence: pin > allow-list > sticky hash > percentage).
// Returns the version to use ("" = the stable subset: every version but the canary's)
// and why.
std::pair<std::string_view, std::string_view> chooseVersion(const ModelConfig& model, std::string_view pin,
                                                            std::string_view sticky_key, std::mt19937_64& rng);

// Stable across processes and replicas of the same build: a user stays on one side.
std::uint64_t stickyHash(std::string_view key);

// Outcome of a finished request, for ejection and latency.
void recordLatency(DeploymentState& s, double ttfb_ms, SteadyClock::time_point now);
void recordOutcome(DeploymentState& s, const OutlierConfig& c, bool failure, SteadyClock::time_point now);

}  // namespace tahua
