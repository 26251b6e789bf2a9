// Adapter for upstream MCP servers (Streamable HTTP): the JSON-RPC message the MCP
// filter prepared (filters/mcp/: the tool's own name, the upstream session in a header
// it adds per attempt) is posted to the server's URL with the gateway's credentials, and
// the answer comes back untouched: one JSON-RPC response, or an event stream whose
// progress notifications and final response pass through as the server wrote them.
#include <boost/json.hpp>

#include "core/ascii.h"
#include "core/json_read.h"
#include "providers/provider.h"
#include "providers/translation.h"

namespace tahua {

namespace bj = boost::json;

namespace {

class McpTranslator final : public ResponseTranslator {
 public:
  explicit McpTranslator(std::string id) : id_(std::move(id)) {}

  void onResponseHead(ResponseHead& head, RequestContext&) override {
    // The upstream's session is the gateway's business: the client holds the gateway's.
    std::erase_if(head.headers, [](const auto& h) { return iequals(h.first, "mcp-session-id"); });
  }

  std::string_view onStreamBytes(std::string_view bytes, bool, RequestContext&) override {
    if (!bytes.empty()) boundary_ = bytes.ends_with("\n\n") || bytes.ends_with("\r\n\r\n");
    return bytes;
  }

  bool atEventBoundary() const override { return boundary_; }

  void onBody(std::string&, RequestContext&) override {}

  // A stream cut short ends with the request's JSON-RPC error, as an event: the client
  // gets an answer to its request, not a stream that stops.
  std::string streamErrorEvent(const Error& error) const override {
    bj::object e;
    e["code"] = -32603;
    e["message"] = error.message;
    bj::object m;
    m["jsonrpc"] = "2.0";
    m["id"] = id_.empty() ? bj::value(nullptr) : bj::parse(id_);
    m["error"] = std::move(e);
    return "event: message\ndata: " + bj::serialize(m) + "\n\n";
  }

 private:
  std::string id_;  // the request's JSON-RPC id, as JSON text
  bool boundary_ = true;
};

class McpAdapter final : public ProviderAdapter {
 public:
  std::string_view type() const override { return "mcp"; }

  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    const ProviderConfig& p = *provider.config;
    UpstreamRequest req;
    req.method = std::string(ctx.method);
    req.path = p.base_path.empty() ? std::string("/") : p.base_path;
    addCommonHeaders(req, ctx, p, "application/json", "application/json, text/event-stream");
    if (!p.api_key.empty()) req.header_lines.append("Authorization: Bearer ").append(p.api_key).append("\r\n");
    req.body = std::move(ctx.body);
    req.expect_stream = true;  // a tool's answer may be a stream of progress
    return req;
  }

  std::unique_ptr<ResponseTranslator> responseTranslator(const RequestContext& ctx, const UpstreamRequest& request,
                                                         const ProviderRuntime&) const override {
    boost::system::error_code ec;
    const bj::value v = readJson(request.body, ec);
    const bj::value* id = !ec && v.is_object() ? v.get_object().if_contains("id") : nullptr;
    return std::make_unique<McpTranslator>(id && (id->is_string() || id->is_int64() || id->is_uint64()) ? bj::serialize(*id) : std::string());
  }
};

}  // namespace

std::unique_ptr<ProviderAdapter> makeMcpAdapter() { return std::make_unique<McpAdapter>(); }

}  // namespace tahua
