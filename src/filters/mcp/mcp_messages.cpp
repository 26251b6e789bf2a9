#include "filters/mcp/mcp_messages.h"

#include <fnmatch.h>

#include <algorithm>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <vector>

#include "core/ascii.h"
#include "core/json_read.h"
#include "core/sha256.h"
#include "sse/sse_parser.h"

namespace tahua::mcp {

namespace bj = boost::json;

std::string_view negotiate(std::string_view wanted) {
  for (std::string_view r : kRevisions)
    if (r == wanted) return r;
  return kRevisions[0];
}

std::string qualified(std::string_view server, std::string_view name) {
  std::string out;
  out.reserve(server.size() + kSeparator.size() + name.size());
  out.append(server).append(kSeparator).append(name);
  return out;
}

bool splitQualified(std::string_view q, std::string_view& server, std::string_view& name) {
  const std::size_t at = q.find(kSeparator);
  if (at == std::string_view::npos || at == 0 || at + kSeparator.size() >= q.size()) return false;
  server = q.substr(0, at);
  name = q.substr(at + kSeparator.size());
  return true;
}

std::string resultMessage(std::string_view id, const bj::value& result) {
  std::string out = R"({"jsonrpc":"2.0","id":)";
  out.append(id).append(R"(,"result":)").append(bj::serialize(result)).append("}");
  return out;
}

std::string errorMessage(std::string_view id, int code, std::string_view message) {
  std::string out = R"({"jsonrpc":"2.0","id":)";
  out.append(id).append(R"(,"error":{"code":)").append(std::to_string(code)).append(R"(,"message":)");
  out.append(bj::serialize(bj::string_view(message.data(), message.size()))).append("}}");
  return out;
}

namespace {

// The response among a stream's events.
class AnswerSink final : public SseSink {
 public:
  explicit AnswerSink(std::string_view id) : id_(id) {}
  void onEvent(const SseEvent& e) override {
    if (found || (!e.event.empty() && e.event != "message")) return;
    if (auto m = response(e.data, id_)) {
      found = std::move(m);
    }
  }
  static std::optional<bj::object> response(std::string_view text, std::string_view id) {
    boost::system::error_code ec;
    bj::value v = readJson(text, ec);
    if (ec || !v.is_object()) return std::nullopt;
    bj::object& o = v.get_object();
    const bj::value* mid = o.if_contains("id");
    if (!mid || bj::serialize(*mid) != id || (!o.contains("result") && !o.contains("error"))) return std::nullopt;
    return std::move(o);
  }
  std::optional<bj::object> found;

 private:
  std::string_view id_;
};

}  // namespace

std::optional<bj::object> answerTo(const OutboundResponse& answer, std::string_view id) {
  if (answer.status < 200 || answer.status >= 300) return std::nullopt;
  std::string_view type;
  for (const auto& [name, value] : answer.headers)
    if (name == "content-type") type = value;
  if (type.starts_with("text/event-stream")) {
    AnswerSink sink(id);
    SseParser parser;
    parser.feed(answer.body, sink);
    parser.feed("\n\n", sink);  // a last event without its blank line
    return std::move(sink.found);
  }
  return AnswerSink::response(answer.body, id);
}

namespace {

bool globMatch(const std::vector<std::string>& globs, const std::string& name) {
  for (const auto& g : globs)
    if (fnmatch(g.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

bool listed(const std::vector<std::string>& names, std::string_view name) {
  return !name.empty() && std::find(names.begin(), names.end(), name) != names.end();
}

// Keys sorted at every level: the same definition always writes the same text.
void canonical(const bj::value& v, std::string& out) {
  if (v.is_object()) {
    const bj::object& o = v.get_object();
    std::vector<const bj::key_value_pair*> items;
    for (const auto& kv : o) items.push_back(&kv);
    std::sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->key() < b->key(); });
    out += '{';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) out += ',';
      out += bj::serialize(bj::value(items[i]->key()));
      out += ':';
      canonical(items[i]->value(), out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& e : v.get_array()) {
      if (!first) out += ',';
      first = false;
      canonical(e, out);
    }
    out += ']';
  } else {
    out += bj::serialize(v);
  }
}

}  // namespace

bool allowed(const McpConfig& config, std::string_view tenant, std::string_view key, std::string_view q) {
  if (config.access.empty()) return true;
  const std::string name(q);
  bool allow = false;
  for (const McpAccessRule& r : config.access) {
    const bool applies = (r.tenants.empty() && r.keys.empty()) || listed(r.tenants, tenant) || listed(r.keys, key);
    if (!applies) continue;
    if (globMatch(r.deny, name)) return false;
    if (r.allow.empty() || globMatch(r.allow, name)) allow = true;
  }
  return allow;
}

bool originAllowed(const McpConfig& config, std::string_view origin) {
  auto u = boost::urls::parse_absolute_uri(origin);
  // Nothing after the authority: Boost.URL 1.81 takes "http://127.0.0.1.evil.com" as host
  // 127.0.0.1 and path ".evil.com".
  if (u && (u->scheme() == "http" || u->scheme() == "https") && u->encoded_path().empty() && !u->has_query() && !u->has_fragment() &&
      !u->has_userinfo()) {
    switch (u->host_type()) {
      case boost::urls::host_type::ipv4:
        if (u->host_ipv4_address().is_loopback()) return true;
        break;
      case boost::urls::host_type::ipv6:
        if (u->host_ipv6_address().is_loopback()) return true;
        break;
      case boost::urls::host_type::name:
        if (iequals(u->encoded_host(), "localhost")) return true;
        break;
      default:
        break;
    }
  }
  for (const std::string& o : config.allowed_origins)  // lower-cased by the loader
    if (o == "*" || iequals(o, origin)) return true;
  return false;
}

bool knownRevision(std::string_view version) {
  for (std::string_view r : kRevisions)
    if (r == version) return true;
  return version == "2025-03-26" || version == "2024-11-05";
}

bj::object pinnedDefinition(const bj::object& tool) {
  bj::object pinned;
  for (std::string_view field : {"name", "title", "description", "inputSchema", "outputSchema", "annotations"})
    if (const bj::value* v = tool.if_contains(field)) pinned[field] = *v;
  return pinned;
}

std::string toolFingerprint(const bj::object& tool) {
  std::string text;
  canonical(pinnedDefinition(tool), text);
  return toHex(sha256(text));
}

namespace {

// RFC 6901: "~" and "/" in a key are escaped.
std::string pointerTo(const std::string& parent, std::string_view key) {
  std::string p = parent + '/';
  for (char ch : key) {
    if (ch == '~') p += "~0";
    else if (ch == '/') p += "~1";
    else p += ch;
  }
  return p;
}

void diff(const bj::value& from, const bj::value& to, const std::string& path, bj::array& ops) {
  if (from == to) return;
  if (from.is_object() && to.is_object()) {
    for (const auto& [key, value] : from.get_object())
      if (!to.get_object().contains(key)) ops.push_back(bj::object{{"op", "remove"}, {"path", pointerTo(path, key)}});
    for (const auto& [key, value] : to.get_object()) {
      if (const bj::value* before = from.get_object().if_contains(key)) diff(*before, value, pointerTo(path, key), ops);
      else ops.push_back(bj::object{{"op", "add"}, {"path", pointerTo(path, key)}, {"value", value}});
    }
    return;
  }
  if (from.is_array() && to.is_array()) {
    const bj::array &a = from.get_array(), &b = to.get_array();
    const std::size_t common = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < common; ++i) diff(a[i], b[i], pointerTo(path, std::to_string(i)), ops);
    for (std::size_t i = common; i < b.size(); ++i) ops.push_back(bj::object{{"op", "add"}, {"path", pointerTo(path, "-")}, {"value", b[i]}});
    // From the end, so each index is still right when the patch is applied in order.
    for (std::size_t i = a.size(); i > common; --i) ops.push_back(bj::object{{"op", "remove"}, {"path", pointerTo(path, std::to_string(i - 1))}});
    return;
  }
  ops.push_back(bj::object{{"op", "replace"}, {"path", path}, {"value", to}});
}

}  // namespace

bj::array definitionPatch(const bj::object& approved, const bj::object& pending) {
  bj::array ops;
  diff(pinnedDefinition(approved), pinnedDefinition(pending), "", ops);
  return ops;
}

}  // namespace tahua::mcp
