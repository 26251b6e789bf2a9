// The MCP gateway's pure parts, free of I/O so they are unit-tested alone: JSON-RPC
// messages, the answers servers give (JSON or an event stream), names namespaced by
// server, the access rules, and the fingerprint a tool's definition is pinned by.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "config/config.h"
#include "http/outbound_call.h"

namespace tahua::mcp {

// The protocol revisions the gateway speaks (the npm @modelcontextprotocol/sdk it is
// tested with negotiates the first), newest first. Both drop JSON-RPC batches.
constexpr std::string_view kRevisions[] = {"2025-11-25", "2025-06-18"};
// The one a client asking for `wanted` gets: the same when served, else the newest.
std::string_view negotiate(std::string_view wanted);

// "server__name": the name a server's tool or prompt has at the gateway.
constexpr std::string_view kSeparator = "__";
std::string qualified(std::string_view server, std::string_view name);
// Splits a qualified name at its first separator (server names never hold one); false
// when there is none.
bool splitQualified(std::string_view qualified, std::string_view& server, std::string_view& name);

// JSON-RPC error codes (the MCP specification's and JSON-RPC 2.0's).
constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;
constexpr int kInternalError = -32603;

// A response to request `id` (JSON text of the id; "null" for none).
std::string resultMessage(std::string_view id, const boost::json::value& result);
std::string errorMessage(std::string_view id, int code, std::string_view message);

// The message a server answered request `id` with: its JSON body, or the event of its
// stream that carries the response (progress and other notifications are skipped).
// Null when the answer is not a JSON-RPC response to `id`.
std::optional<boost::json::object> answerTo(const OutboundResponse& answer, std::string_view id);

// Whether the caller may see and call `qualified` (a tool or prompt): with rules, only
// when a rule that applies to the caller (its tenant or key is listed, or the rule
// lists neither) allows it (a rule without `allow` allows everything) and none that
// applies denies it; a caller no rule applies to sees nothing. No rules: everything.
bool allowed(const McpConfig& config, std::string_view tenant, std::string_view key, std::string_view qualified);

// Whether a request carrying `origin` (its Origin header, not empty) may be served: a
// loopback origin (localhost, 127.0.0.0/8, [::1]) or one of mcp.allowed_origins.
bool originAllowed(const McpConfig& config, std::string_view origin);

// Whether `version` (an MCP-Protocol-Version header) names a published revision: those
// served, and the older ones a client may still send on a request (the session's own
// revision, negotiated at initialize, is what the gateway speaks).
bool knownRevision(std::string_view version);

// What a tool's definition is pinned by: SHA-256 (hex) of its name, title, description,
// schemas and annotations, with object keys sorted, so a server that reorders keys
// changes nothing and one that changes a word changes it.
std::string toolFingerprint(const boost::json::object& tool);
// Those fields of a tool's definition (what its fingerprint covers).
boost::json::object pinnedDefinition(const boost::json::object& tool);
// What changed from the approved definition to the pending one, in what is pinned: a
// JSON Patch (RFC 6902) that turns the one into the other. A changed value is replaced
// where it changed (deep in a schema, not the whole schema); an array keeps its common
// prefix and adds or removes at its end.
boost::json::array definitionPatch(const boost::json::object& approved, const boost::json::object& pending);

}  // namespace tahua::mcp
