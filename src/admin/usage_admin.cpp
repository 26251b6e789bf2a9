#include "admin/usage_admin.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <thread>

#include "core/utc_time.h"
#include "admin/admin_error.h"
#include "admin/store_writes.h"
#include "ledger/request_log.h"
#include "ledger/usage_query.h"
#include "core/thread_name.h"

namespace tahua {
// Named (not anonymous): the coroutine frames below hold these types.
namespace ledger_admin {

constexpr int kMaxRunning = 2;  // queries at once; each holds a thread and a connection
std::atomic<int> running_queries{0};


// `Accept: text/csv` (alone or among others) asks for CSV.
ledger::AnswerFormat formatOf(std::string_view accept) {
  for (std::size_t at = 0; at + 8 <= accept.size(); ++at) {
    std::string_view s = accept.substr(at, 8);
    bool same = true;
    for (std::size_t i = 0; i < 8; ++i) same = same && std::tolower(static_cast<unsigned char>(s[i])) == "text/csv"[i];
    if (same) return ledger::AnswerFormat::Csv;
  }
  return ledger::AnswerFormat::Json;
}

// What a query's thread hands back.
struct QueryResult {
  std::optional<ledger::ReadFailure> failure;
  std::string body, next_cursor;
  bool truncated = false, found = true;
};

AdminReply failureReply(const ledger::ReadFailure& f) {
  using K = ledger::ReadFailure::Kind;
  switch (f.kind) {
    case K::UnknownZone: return adminError(400, "invalid_parameter", "tz: not a time zone the database knows (" + f.message + ")");
    case K::TooManyValues: return adminError(400, "invalid_parameter", "from: " + f.message + ": narrow from..to or filter");
    case K::Deadline: return adminError(503, "query_timeout", "The ledger query " + f.message + ": narrow the range or the grouping.");
    case K::Unavailable: break;
  }
  return adminError(503, "ledger_unavailable", "The ledger did not answer: " + f.message);
}

// Runs `work` on a thread of its own (never the admin worker's), at most kMaxRunning at once.
boost::asio::awaitable<std::optional<QueryResult>> offWorker(std::function<QueryResult()> work) {
  if (running_queries.fetch_add(1) >= kMaxRunning) {
    running_queries.fetch_sub(1);
    co_return std::nullopt;
  }
  auto op = admin_store::await<QueryResult>([work = std::move(work)](std::function<void(QueryResult)> done) mutable {
    std::thread([work = std::move(work), done = std::move(done)]() {
      nameThisThread("tahua-query");
      QueryResult r = work();
      running_queries.fetch_sub(1);
      done(std::move(r));
    }).detach();
  });
  QueryResult r = co_await std::move(op);
  co_return r;
}

AdminReply answer(ledger::AnswerFormat format, std::string body) {
  AdminReply reply{200, std::move(body)};
  if (format == ledger::AnswerFormat::Csv) reply.content_type = "text/csv; charset=utf-8";
  return reply;
}

AdminReply busy() { return adminError(503, "busy", "Two ledger queries are running; try again when they are done."); }

AdminReply forbidden(const AdminCaller& caller) {
  return adminError(403, "forbidden", "tenant: a tenant token sees its own tenant's usage only (" + caller.tenant + ").");
}

}  // namespace ledger_admin

boost::asio::awaitable<std::optional<AdminReply>> handleUsageAdmin(const AdminCaller& caller, const Config& config,
                                                                   std::string_view method, std::string_view rest,
                                                                   std::string_view accept) {
  const std::size_t q = rest.find('?');
  const std::string_view path = rest.substr(0, q), query = q == std::string_view::npos ? std::string_view{} : rest.substr(q + 1);
  const bool usage = path == "usage", log = path == "requests", one = path.substr(0, 9) == "requests/";
  if (!usage && !log && !one) co_return std::nullopt;
  if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
  const UsageSinkConfig* found = ledger::ledgerSink(config.usage);
  if (!found)
    co_return adminError(404, "ledger_not_configured",
                         "No spend ledger to ask: add a usage sink of type sqlite or postgres (usage.sinks[].type; "
                         "docs/ledger.md).");
  const UsageSinkConfig sink = *found;
  const ledger::Dialect dialect = sink.type == UsageSinkConfig::Type::Postgres ? ledger::Dialect::Postgres : ledger::Dialect::Sqlite;
  const ledger::AnswerFormat format = ledger_admin::formatOf(accept);
  // A tenant's token: its tenant only (another named is a 403).
  std::optional<std::string> scope;
  if (!caller.full) scope = caller.tenant;

  if (usage) {
    ledger::UsageQuery uq;
    if (auto bad = ledger::parseUsageQuery(query, utcNowMillis(), uq, sink.query_max_range)) co_return adminError(400, "invalid_parameter", *bad);
    if (auto bad = ledger::zoneRefusal(dialect, uq)) co_return adminError(400, "invalid_parameter", *bad);
    if (scope) {
      if (uq.tenant && *uq.tenant != *scope) co_return ledger_admin::forbidden(caller);
      uq.tenant = scope;
    }
    auto op = ledger_admin::offWorker([sink, uq, format] {
      ledger_admin::QueryResult r;
      ledger::UsageAnswer a;
      r.failure = ledger::runUsageQuery(sink, uq, format, a);
      r.body = std::move(a.body);
      r.truncated = a.truncated;
      return r;
    });
    auto r = co_await std::move(op);  // a named awaitable (GCC 12, see attempt_loop.cpp)
    if (!r) co_return ledger_admin::busy();
    if (r->failure) co_return ledger_admin::failureReply(*r->failure);
    AdminReply reply = ledger_admin::answer(format, std::move(r->body));
    if (format == ledger::AnswerFormat::Csv && r->truncated) reply.headers.emplace_back("X-Tahua-Truncated", "true");
    co_return reply;
  }

  if (log) {
    ledger::RequestLogQuery lq;
    if (auto bad = ledger::parseRequestLogQuery(query, utcNowMillis(), lq, sink.query_max_range))
      co_return adminError(400, "invalid_parameter", *bad);
    if (scope) {
      if (lq.tenant && *lq.tenant != *scope) co_return ledger_admin::forbidden(caller);
      lq.tenant = scope;
    }
    auto op = ledger_admin::offWorker([sink, lq, format] {
      ledger_admin::QueryResult r;
      ledger::RequestLogAnswer a;
      r.failure = ledger::runRequestLog(sink, lq, format, a);
      r.body = std::move(a.body);
      r.next_cursor = std::move(a.next_cursor);
      return r;
    });
    auto r = co_await std::move(op);  // a named awaitable (GCC 12, see attempt_loop.cpp)
    if (!r) co_return ledger_admin::busy();
    if (r->failure) co_return ledger_admin::failureReply(*r->failure);
    AdminReply reply = ledger_admin::answer(format, std::move(r->body));
    if (!r->next_cursor.empty()) reply.headers.emplace_back("X-Next-Cursor", std::move(r->next_cursor));
    co_return reply;
  }

  const std::string id(path.substr(9));
  if (!query.empty()) co_return adminError(400, "invalid_parameter", "A record's URL takes no parameters.");
  if (!ledger::validRecordId(id))
    co_return adminError(400, "invalid_parameter", "record_id: expected a record id (a UUID, as in /admin/v1/requests), got \"" +
                                                       id.substr(0, 64) + "\"");
  auto op = ledger_admin::offWorker([sink, id, scope, format] {
    ledger_admin::QueryResult r;
    ledger::RequestLogAnswer a;
    r.failure = ledger::runRequestDetail(sink, id, scope, format, a);
    r.body = std::move(a.body);
    r.found = a.found;
    return r;
  });
  auto r = co_await std::move(op);
  if (!r) co_return ledger_admin::busy();
  if (r->failure) co_return ledger_admin::failureReply(*r->failure);
  if (!r->found) co_return adminError(404, "not_found", "record_id: no record " + id + " in the ledger" + (scope ? " for tenant " + *scope : "") + ".");
  co_return ledger_admin::answer(format, std::move(r->body));
}

}  // namespace tahua
