// What the admin API asks of the gateway, which implements it (src/runtime/gateway.cpp).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "providers/snapshot.h"
#include "routing/balancer.h"
#include "routing/deployment_state.h"
#include "store/state_store.h"
#include "tenants/tenant_directory.h"

namespace tahua {

class ResponseCache;

// What the admin API needs from the gateway. Calls marked "locked" expect the caller to
// hold lock() (the gateway's control mutex: reloads, self-healing and the admin API all
// publish configs).
class AdminHost {
 public:
  virtual std::mutex& lock() = 0;
  // The response cache's storage (GET and DELETE /admin/v1/cache).
  virtual ResponseCache& responseCache() = 0;
  // Locked. A new config (null: the current one again, with every override applied);
  // an error text if it cannot be published.
  virtual std::optional<std::string> publish(ConfigPtr loaded, std::string_view trigger) = 0;
  // Locked. The config as loaded, before any override.
  virtual const ConfigPtr& baseConfig() const = 0;
  // Locked. Self-healing's view (GET /admin/v1/healing).
  virtual std::string healingJson() const = 0;
  // Locked. The deployments self-healing has ejected: (model, deployment).
  virtual std::set<std::pair<std::string, std::string>> healingEjected() const = 0;
  virtual std::uint64_t generation() const = 0;
  // The Prometheus exposition of /metrics (GET /admin/v1/metrics, the dashboard's data).
  virtual boost::asio::awaitable<std::string> renderMetrics() = 0;
  virtual void countRejectedConfig() = 0;
  // The --listen override, which a config published at run time keeps.
  virtual const std::optional<ListenerConfig>& listenOverride() const = 0;
  // Every worker's copy of the deployments' live state, each taken on its own thread.
  virtual boost::asio::awaitable<std::vector<std::vector<DeploymentState>>> collectDeploymentStates(const Config& config) = 0;
  // "model/id" of deployments gone from `config` with requests still in flight on some
  // worker (DeploymentStates::draining), sorted.
  virtual boost::asio::awaitable<std::vector<std::string>> collectDraining(const Config& config) = 0;
  // Sends a node status table to every worker.
  virtual void publishNodes(NodeTablePtr table) = 0;
  // Shared state (admin-created tenants and keys are records in it).
  virtual StateStore& store() = 0;
  // The tenants and keys in force (config file + store).
  virtual TenantDirectoryPtr tenants() const = 0;
  // Rebuilds the directory from the config and the store's records and waits until
  // every worker uses it (so a key the admin API just answered for works at once).
  virtual boost::asio::awaitable<void> publishTenants() = 0;
  // Locked. Publishes the config again if the store's resources are not those in force.
  virtual void resourcesChanged() = 0;

 protected:
  ~AdminHost() = default;
};

}  // namespace tahua
