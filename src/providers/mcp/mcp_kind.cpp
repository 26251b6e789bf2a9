// The mcp type (config/provider_kind.h): an upstream MCP server speaking Streamable
// HTTP; base_url is its MCP endpoint (https://mcp.example.com/mcp). Its api_key is sent
// as a bearer token, its headers with every call: the gateway's credentials for the
// server, never the caller's. It serves /mcp, not models (config/mcp_section.cpp).
#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

extern const ProviderKind kMcpKind{.type = "mcp"};

}  // namespace tahua
