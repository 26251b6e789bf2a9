#include "filters/mcp/tool_pins.h"

#include <boost/json.hpp>

#include "core/json_read.h"
#include "core/log.h"
#include "filters/mcp/mcp_sessions.h"
#include "store/state_store.h"
#include "telemetry/metrics.h"
#include "translate/json_util.h"

namespace tahua::mcp {

namespace bj = boost::json;

void ToolPins::refresh() {
  const std::uint64_t now = store_.recordsGeneration();
  if (now == generation_) return;
  generation_ = now;
  pins_.clear();
  for (const auto& r : store_.records(kPinNamespace)) {
    boost::system::error_code ec;
    const bj::value v = readJson(r.json, ec);
    Pin& p = pins_[r.id];
    if (ec || !v.is_object()) {
      p.readable = false;
      continue;
    }
    p.approved = std::string(json::strOr(v.get_object(), "fingerprint"));
    if (const bj::object* pending = json::obj(v.get_object(), "pending")) p.pending = std::string(json::strOr(*pending, "fingerprint"));
  }
}

bool ToolPins::holds(const std::string& server, std::string_view tool, std::string_view fingerprint, const bj::object& definition) {
  refresh();
  const std::string id = server + "/" + std::string(tool);
  auto it = pins_.find(id);
  if (it == pins_.end()) {
    bj::object rec{{"server", server},          {"tool", tool},          {"fingerprint", fingerprint},
                   {"definition", definition}, {"approved_by", "first-use"}, {"approved_at", nowMs() / 1000}};
    store_.putRecord(kPinNamespace, id, bj::serialize(rec), [id](std::optional<std::string> error) {
      if (error) log::warn("cannot pin an MCP tool's definition", {{"tool", id}, {"error", *error}});
    });
    pins_[id].approved = std::string(fingerprint);  // until the store's change comes back
    return true;
  }
  Pin& pin = it->second;
  if (!pin.readable) return false;
  if (pin.approved == fingerprint) return true;
  if (pin.pending == fingerprint) return false;  // already held, waiting for an admin
  // A change not seen before: recorded (with its definition, for the admin to read).
  log::warn("an MCP tool's definition changed since it was approved: hidden until an admin approves it",
            {{"server", server}, {"tool", tool}, {"approved", pin.approved}, {"seen", fingerprint}});
  ++metrics_.mcp_tool_changes[server];
  pin.pending = std::string(fingerprint);
  for (const auto& r : store_.records(kPinNamespace)) {
    if (r.id != id) continue;
    boost::system::error_code ec;
    bj::value v = readJson(r.json, ec);
    if (ec || !v.is_object()) break;
    v.get_object()["pending"] = bj::object{{"fingerprint", fingerprint}, {"definition", definition}, {"seen_at", nowMs() / 1000}};
    store_.putRecord(kPinNamespace, id, bj::serialize(v), [id](std::optional<std::string> error) {
      if (error) log::warn("cannot record an MCP tool's changed definition", {{"tool", id}, {"error", *error}});
    });
    break;
  }
  return false;
}

}  // namespace tahua::mcp
