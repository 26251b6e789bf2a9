#include "admin/mcp_admin.h"

#include <boost/json.hpp>
#include <chrono>

#include "admin/admin_error.h"
#include "admin/store_writes.h"
#include "core/json_read.h"
#include "core/json_text.h"
#include "filters/mcp/mcp_messages.h"
#include "filters/mcp/tool_pins.h"
#include "store/state_store.h"

namespace tahua {
namespace bj = boost::json;

boost::asio::awaitable<std::optional<AdminReply>> handleMcpAdmin(StateStore& store, TenantAdmin& audit, const AdminCaller& caller,
                                                                 std::string_view method, std::string_view rest) {
  constexpr std::string_view kPrefix = "mcp/tools";
  if (!rest.starts_with(kPrefix)) co_return std::nullopt;
  std::string_view sub = rest.substr(kPrefix.size());
  if (sub.empty()) {
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
    bj::array out;
    for (const auto& r : store.records(mcp::kPinNamespace)) {
      boost::system::error_code ec;
      bj::value v = readJson(r.json, ec);
      if (ec || !v.is_object()) continue;
      // A change is shown with both definitions and what differs, so the admin sees what
      // they approve.
      bj::object& pin = v.get_object();
      const bj::value* approved = pin.if_contains("definition");
      bj::value* pending = pin.if_contains("pending");
      const bj::value* changed = pending && pending->is_object() ? pending->get_object().if_contains("definition") : nullptr;
      if (approved && approved->is_object() && changed && changed->is_object())
        pending->get_object()["changes"] = mcp::definitionPatch(approved->get_object(), changed->get_object());
      out.push_back(std::move(v));
    }
    co_return AdminReply{200, jsonText(bj::object{{"tools", std::move(out)}})};
  }
  if (sub.front() != '/') co_return std::nullopt;
  sub.remove_prefix(1);
  const bool approve = sub.ends_with("/approve");
  if (approve) sub.remove_suffix(8);
  const std::size_t slash = sub.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == sub.size() || sub.find('/', slash + 1) != std::string_view::npos)
    co_return adminError(404, "unknown_url", "Expected /admin/v1/mcp/tools/{server}/{tool}[/approve].");
  const std::string id(sub);
  std::optional<StateStore::Record> found;
  for (auto& r : store.records(mcp::kPinNamespace))
    if (r.id == id) found = std::move(r);
  if (!found) co_return adminError(404, "not_found", "No pin for the tool " + id + ".");
  if (!approve) {
    if (method != "DELETE") co_return adminError(405, "method_not_allowed", "Use DELETE, or POST .../approve.");
    auto op = admin_store::erase(store, mcp::kPinNamespace, id);
    if (auto error = co_await std::move(op)) co_return adminError(503, "store_unavailable", "The pin could not be removed: " + *error);
    audit.audit(caller, "mcp.tool.forget", id);
    co_return AdminReply{200, jsonText(bj::object{{"forgotten", id}})};
  }
  if (method != "POST") co_return adminError(405, "method_not_allowed", "Use POST.");
  boost::system::error_code ec;
  bj::value v = readJson(found->json, ec);
  bj::object* rec = !ec && v.is_object() ? &v.get_object() : nullptr;
  bj::value* pending = rec ? rec->if_contains("pending") : nullptr;
  if (!pending || !pending->is_object()) co_return adminError(409, "nothing_pending", "The tool " + id + " has no changed definition waiting.");
  bj::object p = std::move(pending->get_object());
  rec->erase("pending");
  (*rec)["fingerprint"] = p["fingerprint"];
  (*rec)["definition"] = p["definition"];
  (*rec)["approved_by"] = caller.name;
  (*rec)["approved_at"] = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto op = admin_store::put(store, mcp::kPinNamespace, id, bj::serialize(*rec));
  if (auto error = co_await std::move(op)) co_return adminError(503, "store_unavailable", "The approval could not be kept: " + *error);
  audit.audit(caller, "mcp.tool.approve", id, bj::value_to<std::string>((*rec)["fingerprint"]));
  co_return AdminReply{200, jsonText(*rec)};
}

}  // namespace tahua
