#include "admin/audit_log.h"

#include <boost/json.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>

#include "admin/admin_error.h"
#include "admin/store_writes.h"
#include "core/json_read.h"
#include "core/json_text.h"
#include "core/utc_time.h"
#include "core/log.h"
#include "http/query.h"
#include "store/state_store.h"

namespace tahua {
namespace asio = boost::asio;
namespace bj = boost::json;

namespace {

constexpr std::size_t kMaxPathChars = 300;
constexpr std::size_t kMaxScanned = 20'000;  // entries one GET reads through, at most (a sparse filter pages on)


// A query value's %XX and '+' decoded; nullopt when malformed.
std::optional<std::string> decoded(std::string_view raw) {
  std::string out;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '+') {
      out += ' ';
    } else if (raw[i] == '%') {
      if (i + 2 >= raw.size() || !std::isxdigit(static_cast<unsigned char>(raw[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(raw[i + 2])))
        return std::nullopt;
      out += static_cast<char>(std::stoi(std::string(raw.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += raw[i];
    }
  }
  return out;
}

// A note for a change whose handler named none: after the URL (/admin/v1/<collection>/<id...>).
AuditNote noteFromPath(std::string_view method, std::string_view path) {
  constexpr std::string_view kPrefix = "/admin/v1/";
  std::string_view rest = path.starts_with(kPrefix) ? path.substr(kPrefix.size()) : path;
  const std::size_t slash = rest.find('/');
  AuditNote n;
  std::string verb(method);
  for (char& c : verb) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  n.action = std::string(rest.substr(0, slash)) + "." + verb;
  n.target = std::string(slash == std::string_view::npos ? rest : rest.substr(slash + 1));
  return n;
}

}  // namespace

bool AuditLog::recorded(std::string_view method, int status) {
  // A change made, or one an authenticated caller was refused. A refused read changes
  // nothing (and the console's sign-in asks what a token may see).
  if (method == "GET" || method == "HEAD" || method == "OPTIONS") return false;
  return (status >= 200 && status < 300) || status == 403;
}

asio::awaitable<void> AuditLog::record(const AdminCaller& caller, std::string_view method, std::string_view path, int status,
                                       std::size_t keep) {
  AuditNote note = caller.note.action.empty() ? noteFromPath(method, path) : caller.note;
  if (note.tenant.empty()) note.tenant = caller.tenant;  // a tenant token's change is its tenant's
  if (path.size() > kMaxPathChars) path = path.substr(0, kMaxPathChars);
  if (note.target.size() > kMaxPathChars) note.target.resize(kMaxPathChars);
  bj::object o{{"time", utcNowMillis()}, {"who", caller.name}};
  if (!caller.tenant.empty()) o["tenant_scope"] = caller.tenant;  // the token is that tenant's
  if (!note.tenant.empty()) o["tenant"] = note.tenant;            // the change concerns that tenant
  o["method"] = method;
  o["path"] = path;
  o["action"] = note.action;
  o["target"] = note.target;
  if (!note.detail.empty()) o["detail"] = note.detail;
  o["status"] = status;
  log::info(status == 403 ? "admin action refused" : "admin action", o);
  std::string json = bj::serialize(o);
  std::function<void(std::function<void(admin_store::WriteResult)>)> start = [&store = host_.store(), json = std::move(json), keep](
                                                                                 std::function<void(admin_store::WriteResult)> done) mutable {
    store.appendLog(kLogName, std::move(json), keep, std::move(done));
  };
  auto op = admin_store::await<admin_store::WriteResult>(std::move(start));
  const admin_store::WriteResult failed = co_await std::move(op);
  if (failed)
    log::warn("admin action not kept in the audit log (it is in this log line only)",
              {{"who", caller.name}, {"action", note.action}, {"target", note.target}, {"error", *failed}});
}

asio::awaitable<AdminReply> AuditLog::list(const AdminCaller& caller, std::string_view method, std::string_view query) {
  if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
  std::size_t limit = kDefaultLimit;
  if (auto v = queryParam(query, "limit")) {
    std::size_t n = 0;
    bool ok = !v->empty() && v->size() <= 4;
    for (char c : *v) ok = ok && std::isdigit(static_cast<unsigned char>(c)) && (n = n * 10 + static_cast<std::size_t>(c - '0'), true);
    if (!ok || n < 1 || n > kMaxLimit)
      co_return adminError(400, "invalid_request", "limit must be a whole number from 1 to " + std::to_string(kMaxLimit) + ".");
    limit = n;
  }
  std::string before;
  if (auto v = queryParam(query, "cursor")) {
    if (v->empty() || v->size() > 64 || v->find_first_not_of("0123456789-") != std::string_view::npos)
      co_return adminError(400, "invalid_request", "cursor must be a next_cursor this endpoint returned.");
    before = std::string(*v);
  }
  std::optional<std::string> who;
  if (auto v = queryParam(query, "who")) {
    who = decoded(*v);
    if (!who || who->empty() || who->size() > 128)
      co_return adminError(400, "invalid_request", "who must be a token's name (1-128 characters, URL-encoded).");
  }
  const bool filtered = who || !caller.full;
  bj::array entries;
  bj::value next = nullptr;
  std::size_t scanned = 0;
  for (;;) {
    const std::size_t ask = filtered ? std::size_t{200} : limit - entries.size();
    std::function<void(std::function<void(StateStore::LogPage)>)> start = [&store = host_.store(), before, ask](std::function<void(StateStore::LogPage)> done) {
      store.readLog(kLogName, before, ask, std::move(done));
    };
    auto op = admin_store::await<StateStore::LogPage>(std::move(start));
    StateStore::LogPage page = co_await std::move(op);
    if (page.error) co_return adminError(503, "store_unavailable", "The audit log could not be read: " + *page.error);
    for (const auto& e : page.entries) {
      before = e.id;
      ++scanned;
      boost::system::error_code ec;
      bj::value v = readJson(e.json, ec);
      if (ec || !v.is_object()) continue;
      bj::object& o = v.get_object();
      auto text = [&](std::string_view f) {
        const bj::value* x = o.if_contains(f);
        return x && x->is_string() ? std::string_view(x->get_string()) : std::string_view{};
      };
      if (!caller.full && text("tenant") != caller.tenant) continue;
      if (who && text("who") != *who) continue;
      o["id"] = e.id;
      entries.push_back(std::move(v));
      if (entries.size() == limit) break;
    }
    if (entries.size() == limit) {
      next = bj::string(before);  // there may be more past the last one returned
      break;
    }
    if (page.entries.size() < ask) break;  // the oldest kept entry was read
    if (scanned >= kMaxScanned) {
      next = bj::string(before);  // read this far for this page; the next one goes on from here
      break;
    }
  }
  co_return AdminReply{200, jsonText(bj::object{{"entries", std::move(entries)}, {"next_cursor", std::move(next)}})};
}

}  // namespace tahua
