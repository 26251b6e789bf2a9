// The admin API's registered endpoints (/admin/v1/endpoints): inference servers (or an
// agent beside them) register and renew themselves, and every replica sharing the
// store routes to them (discovery/registrations.h).
//
//   GET    /admin/v1/endpoints                  every registration and when it expires
//   PUT    /admin/v1/endpoints/{model}/{id}     {"address", "provider", "upstream_model",
//                                               "version", "labels", "weight", "ttl"}: register or renew
//   DELETE /admin/v1/endpoints/{model}/{id}     deregister
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "admin/admin_host.h"
#include "admin/tenant_admin.h"
#include "discovery/registrations.h"
#include "server/session_host.h"

namespace tahua {

class EndpointAdmin {
 public:
  EndpointAdmin(AdminHost& host, TenantAdmin& audit) : host_(host), audit_(audit) {}

  boost::asio::awaitable<std::optional<AdminReply>> handle(const AdminCaller& caller, const Config& config, std::string_view method,
                                                           std::string_view rest, const std::string& body);

  // Locked. The registrations in force (expired ones dropped).
  std::vector<Registration> registrations(std::chrono::system_clock::time_point now);
  // Locked. The shared store's registrations (every replica's) merged in; true if that
  // changed what is in force.
  bool mergeStore(const std::vector<StateStore::Record>& records);

 private:
  AdminHost& host_;
  TenantAdmin& audit_;
  std::map<std::string, Registration, std::less<>> regs_;  // "model/id" (locked)
  std::set<std::string, std::less<>> in_store_;           // of them, the ones last seen in the store (locked)
};

}  // namespace tahua
