#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

class StateStore;
class WorkerServices;
struct WorkerMetrics;

// The MCP gateway (POST and DELETE /mcp; docs/mcp-gateway.md): one
// MCP endpoint in front of the servers configured as `mcp` providers.
// - initialize is answered here: a session of the gateway's own (Mcp-Session-Id),
//   kept in the state store (so another replica continues it) for mcp.session_ttl. Its
//   upstream sessions, one per server, are opened when first needed and kept beside it.
// - tools/list, prompts/list, resources/list and resources/templates/list are asked of
//   every server and merged; tools and prompts are named "<server>__<name>" so no server
//   shadows another; what the caller may not see (mcp.access) is left out.
// - tools/call, prompts/get, resources/read|subscribe|unsubscribe and
//   completion/complete go to their server through the data path
//   (the `mcp` adapter, the limits, retries' rules, metrics, logs): this filter picks the
//   target, names the tool as the server knows it, and adds the upstream session. The
//   server's answer is relayed as it comes, progress notifications included.
// - /mcp/{server} is that server to its client: its session opens at initialize with
//   the client's capabilities, and what the gateway does not look into (the client's
//   answers and notifications, logging/setLevel, its GET stream) goes to it.
// - Safety: a request whose Origin is neither loopback nor in mcp.allowed_origins is
//   refused (DNS rebinding); a hidden tool and an unknown one answer alike; a tool whose definition
//   changed since it was approved is hidden until an admin approves the change
//   (/admin/v1/mcp/tools); arguments are checked against the tool's inputSchema; a
//   server's answer is bounded by mcp.max_response_bytes.
// Every tools/call is counted (tahua_mcp_tool_calls_total) and carries its tool and
// outcome into the access log and usage record (its arguments only with
// mcp.audit_arguments). After auth (the caller), before the limits and the balancer.
std::unique_ptr<Filter> makeMcpFilter(StateStore& store, WorkerServices& services, WorkerMetrics& metrics);

}  // namespace tahua
