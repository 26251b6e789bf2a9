// The admin API's audit log: every change made through it (any method but GET, HEAD and
// OPTIONS that succeeded) and every such change refused to an authenticated caller (403;
// not a 401: anyone could fill the log with those, they are log lines), with who (the token's
// name, its tenant if it is a tenant token), when, method, path, the resource, a short
// summary (never a secret) and the answer's status. Kept in the state store as a bounded
// log (StateStore::appendLog: a Redis stream shared by every replica, or in memory) and
// written as a log line ("admin action").
//
//   GET /admin/v1/audit?limit=&cursor=&who=   newest first; a tenant token: its tenant's only
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <optional>
#include <string_view>

#include "admin/admin_caller.h"
#include "admin/admin_host.h"
#include "server/session_host.h"

namespace tahua {

class AuditLog {
 public:
  static constexpr std::string_view kLogName = "admin_audit";
  static constexpr std::size_t kDefaultLimit = 100, kMaxLimit = 500;

  // The store is asked of `host` at each call (it is made after the admin API).
  explicit AuditLog(AdminHost& host) : host_(host) {}

  // Whether an answer to `method` with `status` is recorded.
  static bool recorded(std::string_view method, int status);
  // Records one answered request (`path` without its query): the caller's note if its
  // handler left one, else a note from the URL. Waits for the store (bounded by its
  // command timeout); a store that fails is logged, the answer stands.
  boost::asio::awaitable<void> record(const AdminCaller& caller, std::string_view method, std::string_view path, int status,
                                      std::size_t keep);
  // GET /admin/v1/audit (`query`: after '?').
  boost::asio::awaitable<AdminReply> list(const AdminCaller& caller, std::string_view method, std::string_view query);

 private:
  AdminHost& host_;
};

}  // namespace tahua
