// GET /admin/v1/usage?from=&to=&group_by=&tenant=&key=&model=: requests, errors, tokens
// and cost per group from the spend ledger (docs/ledger.md#the-usage-endpoint). A
// tenant's admin token sees its own tenant only. The query runs on a thread of its own
// (two at most at once), never on the admin listener's worker.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string_view>

#include "admin/tenant_admin.h"
#include "config/config.h"
#include "server/session_host.h"

namespace tahua {

// nullopt when `rest` (the path after /admin/v1/, query included) is not this endpoint.
boost::asio::awaitable<std::optional<AdminReply>> handleUsageAdmin(const AdminCaller& caller, const Config& config,
                                                                   std::string_view method, std::string_view rest);

}  // namespace tahua
