// The admin API (/admin/v1/...): its own class with its own state (the canary overrides
// an operator set, the GPU node status table), served on the admin listener's worker.
// What it changes goes out through the gateway (AdminHost): a config published to every
// worker, a node table sent to every worker.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "providers/snapshot.h"
#include "routing/balancer.h"
#include "routing/deployment_state.h"
#include "server/session_host.h"

namespace tahua {

// What the admin API needs from the gateway. Calls marked "locked" expect the caller to
// hold lock() (the gateway's control mutex: reloads, self-healing and the admin API all
// publish configs).
class AdminHost {
 public:
  virtual std::mutex& lock() = 0;
  // Locked. A new config (null: the current one again, with every override applied);
  // an error text if it cannot be published.
  virtual std::optional<std::string> publish(ConfigPtr loaded, std::string_view trigger) = 0;
  // Locked. The config as loaded, before any override.
  virtual const ConfigPtr& baseConfig() const = 0;
  // Locked. Self-healing's view (GET /admin/v1/healing).
  virtual std::string healingJson() const = 0;
  virtual std::uint64_t generation() const = 0;
  virtual void countRejectedConfig() = 0;
  // The --listen override, which a config published at run time keeps.
  virtual const std::optional<ListenerConfig>& listenOverride() const = 0;
  // Every worker's copy of the deployments' live state, each taken on its own thread.
  virtual boost::asio::awaitable<std::vector<std::vector<DeploymentState>>> collectDeploymentStates(const Config& config) = 0;
  // Sends a node status table to every worker.
  virtual void publishNodes(NodeTablePtr table) = 0;

 protected:
  ~AdminHost() = default;
};

class AdminApi {
 public:
  explicit AdminApi(AdminHost& host) : host_(host) {}

  // One admin request, on the admin listener's worker: `snapshot` and `nodes` are that
  // worker's.
  boost::asio::awaitable<AdminReply> handle(SnapshotPtr snapshot, NodeTablePtr nodes, std::string_view method,
                                            std::string_view path, std::string_view authorization, std::string& body);

  // Locked (AdminHost::lock). Puts the operator's canary percentages on a config being
  // published; a newly loaded config replaces them (the newest action wins).
  void applyOverrides(Config& config) const;
  void configReplaced() { canary_overrides_.clear(); }

 private:
  AdminHost& host_;
  std::map<std::string, double, std::less<>> canary_overrides_;  // model -> percent (locked)
  NodeTable nodes_;                                               // GPU node status reports (locked)
};

}  // namespace tahua
