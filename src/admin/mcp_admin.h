// The MCP gateway's tool pins (filters/mcp/): each tool's approved definition, and the
// changed one a server now offers, held until an admin approves it.
//
//   GET    /admin/v1/mcp/tools                          every pin: {server, tool, fingerprint, definition,
//                                                        approved_by, approved_at, pending?: {fingerprint,
//                                                        definition, seen_at, changes (JSON Patch)}}
//   POST   /admin/v1/mcp/tools/{server}/{tool}/approve  the pending definition becomes the approved one
//   DELETE /admin/v1/mcp/tools/{server}/{tool}          forget the pin (the next definition seen is approved)
#pragma once

#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string_view>

#include "admin/tenant_admin.h"
#include "server/session_host.h"

namespace tahua {

class StateStore;

boost::asio::awaitable<std::optional<AdminReply>> handleMcpAdmin(StateStore& store, TenantAdmin& audit, const AdminCaller& caller,
                                                                 std::string_view method, std::string_view rest);

}  // namespace tahua
