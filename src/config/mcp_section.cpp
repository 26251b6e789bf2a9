// The `mcp` section and the MCP servers: every provider of type `mcp` is an upstream MCP
// server, fronted at /mcp (filters/mcp/); the section says who may see and call what.
#include <boost/url/parse.hpp>
#include <optional>

#include "config/loader_detail.h"
#include "core/ascii.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kMcpFields[] = {
    list("access", "[]",
         "Who sees and calls what; with any rules, a caller no rule applies to sees nothing; none at all: every caller "
         "sees everything."),
    duration("session_ttl", 60'000, "24h",
             "An MCP session (the gateway's and its upstream ones, in the state store) lives this long from its "
             "initialize."),
    integer("max_response_bytes", 1024, 1u << 30, "4194304",
            "The largest answer relayed from a server (a tool's result, a stream's events); over it: a JSON-RPC error."),
    duration("call_timeout", 100, "10s", "Each call the gateway makes to a server itself (initialize, the lists)."),
    boolean("audit_arguments", "false", "A tools/call's arguments in its access log line and usage record."),
    boolean("pin_tools", "true",
            "A tool whose description or schemas changed since they were approved is hidden until an admin approves "
            "the change (/admin/v1/mcp/tools)."),
    boolean("validate_arguments", "true", "Arguments are checked against the tool's inputSchema before the call."),
    list("allowed_origins", "[]",
         "Browser origins served besides loopback ones (`https://app.example.com`, or `*`); a request with another "
         "Origin gets 403 (DNS rebinding); one without an Origin is not checked."),
};
const Table kMcp("mcp", "The MCP gateway: every provider of type mcp is an MCP server, fronted at /mcp "
                 "(docs/mcp-gateway.md). The section needs at least one.",
                 kMcpFields);

constexpr Field kAccessFields[] = {
    any("tenants", "", "The callers of these tenants (a name or a list); with neither tenants nor keys: everyone."),
    any("keys", "", "The callers with these keys, by name (a name or a list)."),
    any("allow", "", "Shell globs over `server__name` the callers may see and call; absent: everything."),
    any("deny", "", "Shell globs they may not; the deny of any rule that applies wins."),
};
const Table kAccess("mcp.access[]", "A rule over tools, prompts and resources; a hidden one answers as an unknown one.",
                    kAccessFields);

// A server's name prefixes its tools ("github__create_issue"): letters, digits, - and _,
// and never the separator itself, so the split is unambiguous.
bool validServerName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name.find("__") != std::string_view::npos || name.back() == '_') return false;
  return name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == std::string_view::npos;
}

// An origin as browsers send it: http(s)://host[:port], nothing after; lower-cased.
std::optional<std::string> normalOrigin(std::string_view text) {
  auto u = boost::urls::parse_absolute_uri(text);
  if (!u || (u->scheme() != "http" && u->scheme() != "https") || u->host().empty() || u->has_userinfo() ||
      !u->encoded_path().empty() || u->has_query() || u->has_fragment())
    return std::nullopt;
  std::string out(text);
  for (char& ch : out) ch = asciiLower(ch);
  return out;
}

}  // namespace

void Loader::loadMcp(const YAML::Node& root, Config& cfg) {
  McpConfig& m = cfg.mcp;
  const YAML::Node providers = root["providers"];
  for (std::size_t i = 0; i < cfg.providers.size(); ++i) {
    const ProviderConfig& pc = cfg.providers[i];
    if (pc.type != "mcp") continue;
    if (!validServerName(pc.name))
      fail(providers[i]["name"], "providers[" + std::to_string(i) + "].name",
           "an mcp server's name prefixes its tools (\"" + pc.name +
               "__tool\"): letters, digits, - and _ only, at most 64, without \"__\" and not ending in _");
    ModelConfig t;
    t.name = "mcp:" + pc.name;
    DeploymentConfig d;
    d.provider = pc.name;
    d.provider_index = i;
    d.id = pc.name;
    t.deployments.push_back(std::move(d));
    markCanaryDeployments(t);
    m.targets.push_back(std::move(t));
  }
  const YAML::Node n = root["mcp"];
  if (!n) return;
  const std::string p = "mcp";
  if (m.targets.empty()) fail(n, p, "no provider is of type mcp: declare the MCP servers under `providers` with type: mcp");
  Fields f(*this, n, p, kMcp);
  if (auto a = f["access"]) {
    if (!a.IsSequence()) fail(a, p + ".access", "expected a list of rules ({tenants, keys, allow, deny})");
    for (std::size_t k = 0; k < a.size(); ++k) {
      const std::string rp = p + ".access[" + std::to_string(k) + "]";
      McpAccessRule r;
      matchLists(a[k], rp, kAccess, {{"tenants", &r.tenants}, {"keys", &r.keys}, {"allow", &r.allow}, {"deny", &r.deny}});
      m.access.push_back(std::move(r));
    }
  }
  f.read("session_ttl", m.session_ttl);
  f.read("max_response_bytes", m.max_response_bytes);
  f.read("call_timeout", m.call_timeout);
  f.read("audit_arguments", m.audit_arguments);
  f.read("pin_tools", m.pin_tools);
  f.read("validate_arguments", m.validate_arguments);
  if (auto o = f["allowed_origins"]) {
    if (!o.IsSequence()) fail(o, p + ".allowed_origins", "expected a list of origins (\"https://app.example.com\") or \"*\"");
    for (std::size_t k = 0; k < o.size(); ++k) {
      const std::string op = p + ".allowed_origins[" + std::to_string(k) + "]";
      const std::string text = nonEmpty(o[k], op);
      if (text == "*") {
        m.allowed_origins.push_back(text);
        continue;
      }
      auto origin = normalOrigin(text);
      if (!origin) fail(o[k], op, "\"" + text + "\" is not an origin: http:// or https://, a host and an optional port, no path");
      m.allowed_origins.push_back(std::move(*origin));
    }
  }
}

}  // namespace tahua::config_detail
