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
#include "routing/deployment_state.h"

namespace tahua {

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
