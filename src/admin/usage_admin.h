// The spend ledger's admin endpoints (docs/ledger.md#the-usage-endpoint,
// #the-request-log): GET /admin/v1/usage (sums and latency percentiles per group), GET
// /admin/v1/requests (the request log, keyset-paged) and GET
// /admin/v1/requests/{record_id}; JSON, or CSV with `Accept: text/csv`. A tenant's admin
// token sees its own tenant only. Each query runs on a thread of its own with its own
// connection (two at most at once), never on the admin listener's worker.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string_view>

#include "admin/tenant_admin.h"
#include "config/config.h"
#include "server/session_host.h"

namespace tahua {

// nullopt when `rest` (the path after /admin/v1/, query included) is none of these endpoints.
boost::asio::awaitable<std::optional<AdminReply>> handleUsageAdmin(const AdminCaller& caller, const Config& config,
                                                                   std::string_view method, std::string_view rest,
                                                                   std::string_view accept);

}  // namespace tahua
