// The admin API's resources (/admin/v1/resources): ModelRoute, RateLimitPolicy,
// PromptTemplate and Plugin kept in the state store, so a fleet sharing a Redis converges
// on them without distributing files. Operator token only.
//
//   GET    /admin/v1/resources                  every stored resource and its state:
//                                               applied | shadowed (the file declares it) | invalid
//   PUT    /admin/v1/resources/{Kind}/{name}    body: the spec as JSON; checked against the
//                                               config in force first (400 with the error)
//   DELETE /admin/v1/resources/{Kind}/{name}
//   GET    /admin/v1/plugins                    the plugins in force (config and store) and
//                                               the stored ones that are invalid, with why
//   PUT|GET|DELETE /admin/v1/plugins/{id}       = /admin/v1/resources/Plugin/{id}
//
// Checking and applying resources runs on a thread of its own, not on the worker that
// serves the admin request (a plugin is compiled and its top level run).
//
// Precedence (docs/tenants-and-limits.md): the config file, then these, then the admin
// API's run-time overrides. A resource the file declares cannot be put here (409).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "admin/admin_host.h"
#include "admin/tenant_admin.h"
#include "server/session_host.h"

namespace tahua {

class ResourceAdmin {
 public:
  ResourceAdmin(AdminHost& host, TenantAdmin& audit) : host_(host), audit_(audit) {}

  // The answer for `rest` (the path after /admin/v1/) if it is a resources path.
  boost::asio::awaitable<std::optional<AdminReply>> handle(const AdminCaller& caller, std::string_view method,
                                                           std::string_view rest, const std::string& body);

 private:
  boost::asio::awaitable<void> republish();
  boost::asio::awaitable<AdminReply> pluginList();

  AdminHost& host_;
  TenantAdmin& audit_;  // the audit trail every admin change goes to
};

}  // namespace tahua
