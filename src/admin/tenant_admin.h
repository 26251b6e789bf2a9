// The admin API's tenants and keys (/admin/v1/tenants, /admin/v1/keys). Records live in the state store (so a
// key created through one replica works on all, and survives restarts); the gateway
// then publishes a new tenant directory to every worker before the answer goes out.
//
//   GET    /admin/v1/tenants               list (a tenant token: its own)
//   POST   /admin/v1/tenants               {"name", "models", "limits", "model_limits"}   (admin token)
//   GET    /admin/v1/tenants/{name}        one, with its limits' usage
//   PATCH  /admin/v1/tenants/{name}        models, limits, model_limits                   (admin token)
//   DELETE /admin/v1/tenants/{name}        one without keys                               (admin token)
//   GET    /admin/v1/keys[?tenant=name]    list: names, prefixes, never secrets
//   POST   /admin/v1/keys                  {"name", "tenant", "models", "expires_at", "limits", "metadata"}
//                                          -> 201 with "key": the secret, shown this once
//   GET    /admin/v1/keys/{name}           one, with its limits' usage
//   PATCH  /admin/v1/keys/{name}           models, expires_at, limits, metadata
//   DELETE /admin/v1/keys/{name}           revoke
//
// Tenants and keys declared in the config file are listed but not changed here (409):
// the file is their source of truth.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "admin/admin_caller.h"
#include "admin/admin_host.h"
#include "server/session_host.h"

namespace tahua {

class TenantAdmin {
 public:
  explicit TenantAdmin(AdminHost& host) : host_(host) {}

  // The answer for `rest` (the path after /admin/v1/) if it is one of this class's.
  boost::asio::awaitable<std::optional<AdminReply>> handle(const AdminCaller& caller, const Config& config,
                                                           std::string_view method, std::string_view rest,
                                                           const std::string& body);

  // Names the change a handler made (these and the rest of the admin API's) for the audit
  // log, which records it with who, when and the answer's status (admin/audit_log.h).
  // `detail` is a short summary, never a secret; `tenant`: the tenant it concerns.
  static void audit(const AdminCaller& caller, std::string_view action, std::string_view target, std::string_view detail = {},
                    std::string_view tenant = {});

 private:
  boost::asio::awaitable<AdminReply> tenants(const AdminCaller& caller, const Config& config, std::string_view method,
                                             std::string_view name, const std::string& body);
  boost::asio::awaitable<AdminReply> keys(const AdminCaller& caller, const Config& config, std::string_view method,
                                          std::string_view name, std::string_view query, const std::string& body);
  AdminHost& host_;
};

}  // namespace tahua
