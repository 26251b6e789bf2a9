// The `mcp` section (mcp_section.cpp): who may see and call what through the MCP
// gateway, and one routing target per `mcp` provider.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.h"
#include "core/duration.h"

namespace tahua {

// The MCP gateway (docs/mcp-gateway.md): the providers of type
// `mcp` are upstream MCP servers (Streamable HTTP), fronted together at /mcp with their
// tools, prompts and resources merged and named "<server>__<name>".
struct McpAccessRule {
  // Whom the rule applies to: callers of these tenants or keys (by name); neither: everyone.
  std::vector<std::string> tenants, keys;
  // Shell globs over the namespaced names ("github__create_*"): a tool or prompt is
  // visible when a rule that applies allows it and none that applies denies it.
  std::vector<std::string> allow, deny;
};

struct McpConfig {
  // Rules for who sees and calls what; none at all: every caller sees everything.
  std::vector<McpAccessRule> access;
  // How long a session (the gateway's and its upstream ones, in the state store) lives
  // from its initialize.
  Millis session_ttl{24LL * 3600 * 1000};
  // The largest answer relayed from a server (a tool's result, a stream's events).
  std::size_t max_response_bytes = 4u << 20;
  // Each fan-out call to a server (initialize, tools/list, ...) answers within this.
  Millis call_timeout{10'000};
  // The access log and usage record of a tools/call carry its arguments (off: never).
  bool audit_arguments = false;
  // Tool-definition pinning: a tool whose description or schemas changed since they were
  // approved is hidden until an admin approves the change (/admin/v1/mcp/tools).
  bool pin_tools = true;
  // Arguments are checked against the tool's inputSchema before the call.
  bool validate_arguments = true;
  // Origins (scheme://host[:port], lower case; "*": any) a request with an Origin header
  // may come from, besides loopback ones (DNS rebinding: a web page's script must not
  // reach MCP servers through a gateway on the same machine). No Origin: not checked.
  std::vector<std::string> allowed_origins;
  // Built by the loader: one routing target per `mcp` provider, a model of its own named
  // "mcp:<server>", not in `models` and never routable by name.
  std::vector<ModelConfig> targets;
  const ModelConfig* targetOf(std::string_view server) const {
    for (const auto& t : targets)
      if (t.deployments.front().provider == server) return &t;
    return nullptr;
  }
};

}  // namespace tahua
