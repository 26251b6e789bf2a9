#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "filters/filter.h"
#include "routing/balancer.h"

namespace tahua {

struct WorkerMetrics;

// Live state of every deployment this worker has routed to, by "model/id". Entries are
// never moved (a request keeps a pointer to its deployment's state across a reload) and
// survive reloads that keep the name; the map holds at most the deployments ever
// configured. States live in chunks allocated in config order, so a model's
// deployments sit next to each other: a decision over 100 of them walks a few
// contiguous cache lines instead of 100 scattered heap blocks.
class DeploymentStates {
 public:
  DeploymentState& get(std::string_view model, std::string_view id);
  const DeploymentState* find(std::string_view model, std::string_view id) const;
  // Draining: "model/id" of deployments `config` no longer has (an endpoint gone from
  // DNS, a registration expired) that still have requests in flight here.
  std::vector<std::string> draining(const Config& config) const;
  // What a draining deployment was: "dns" (an endpoint, id "<id>@<address>") or "other"
  // (a registration, or a deployment a reload removed).
  static const char* drainingSource(std::string_view id) { return id.find('@') != std::string_view::npos ? "dns" : "other"; }

 private:
  static constexpr std::size_t kChunk = 256;
  std::unordered_map<std::string, DeploymentState*, StringHash, std::equal_to<>> map_;
  std::vector<std::unique_ptr<DeploymentState[]>> chunks_;
  std::size_t used_ = kChunk;  // slots taken in the last chunk
};

// onUpstreamSelect: picks the deployment of ctx.model (canary split, ejection, policy)
// and sets ctx.deployment / ctx.provider. onUpstreamHeaders: the provider's rate-limit
// headers (as it sent them). onComplete: outstanding count, latency, failures and ejection.
std::unique_ptr<Filter> makeBalancerFilter(DeploymentStates& states, const Config& config, const NodeTablePtr& nodes,
                                           Balancer& balancer);

}  // namespace tahua
