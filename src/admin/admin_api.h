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
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "providers/snapshot.h"
#include "routing/balancer.h"
#include "routing/deployment_state.h"
#include "admin/admin_host.h"
#include "admin/audit_log.h"
#include "admin/endpoint_admin.h"
#include "admin/resource_admin.h"
#include "admin/tenant_admin.h"
#include "server/session_host.h"

namespace tahua {

class AdminApi {
 public:
  explicit AdminApi(AdminHost& host)
      : host_(host),
        tenant_admin_(host),
        resource_admin_(host, tenant_admin_),
        endpoint_admin_(host, tenant_admin_),
        audit_log_(host) {}

  // One admin request, on the admin listener's worker: `snapshot` and `nodes` are that
  // worker's; `path` is the request target, query included.
  boost::asio::awaitable<AdminReply> handle(SnapshotPtr snapshot, NodeTablePtr nodes, std::string_view method,
                                            std::string_view path, std::string_view authorization, std::string_view accept,
                                            std::string& body);

  // Locked (AdminHost::lock). Puts the operator's canary percentages on a config being
  // published; a newly loaded config replaces them (the newest action wins).
  void applyOverrides(Config& config) const;
  void configReplaced() { canary_overrides_.clear(); }
  // Locked. The node reports of the shared store (every replica's) into the node table;
  // the merged table, to be sent to the workers, or null if nothing changed.
  NodeTablePtr mergeStoreNodes(const std::vector<StateStore::Record>& records);
  // Locked. Registered endpoints (see EndpointAdmin).
  EndpointAdmin& endpoints() { return endpoint_admin_; }

 private:
  // An authenticated request (`path`: the target, query included), once the caller is known.
  boost::asio::awaitable<AdminReply> route(SnapshotPtr snapshot, NodeTablePtr nodes, const AdminCaller& who, std::string_view method,
                                           std::string_view path, std::string_view accept, std::string& body);
  AdminHost& host_;
  TenantAdmin tenant_admin_;  // /admin/v1/tenants, /keys, /audit
  ResourceAdmin resource_admin_;  // /admin/v1/resources
  EndpointAdmin endpoint_admin_;  // /admin/v1/endpoints (registrations)
  AuditLog audit_log_;            // /admin/v1/audit, and every change recorded
  std::map<std::string, double, std::less<>> canary_overrides_;  // model -> percent (locked)
  NodeTable nodes_;                                               // GPU node status reports (locked)
  std::set<std::string, std::less<>> store_nodes_;  // of them, the ones last seen in the shared store (locked)
};

}  // namespace tahua
