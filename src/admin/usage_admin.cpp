#include "admin/usage_admin.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include "admin/admin_error.h"
#include "admin/store_writes.h"
#include "ledger/usage_query.h"

namespace tahua {
namespace {

constexpr int kMaxRunning = 2;  // queries at once; each holds a thread and a connection
std::atomic<int> running_queries{0};

std::string nowUtc() {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

struct QueryResult {
  bool ok = false;
  std::string json, error;
};

}  // namespace

boost::asio::awaitable<std::optional<AdminReply>> handleUsageAdmin(const AdminCaller& caller, const Config& config,
                                                                   std::string_view method, std::string_view rest) {
  const std::size_t q = rest.find('?');
  if (rest.substr(0, q) != "usage") co_return std::nullopt;
  if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
  const UsageSinkConfig* sink = ledger::ledgerSink(config.usage);
  if (!sink)
    co_return adminError(404, "ledger_not_configured",
                         "No spend ledger to ask: add a usage sink of type sqlite or postgres (usage.sinks[].type; "
                         "docs/ledger.md).");
  ledger::UsageQuery query;
  if (auto bad = ledger::parseUsageQuery(q == std::string_view::npos ? std::string_view{} : rest.substr(q + 1), nowUtc(), query))
    co_return adminError(400, "invalid_parameter", *bad);
  if (!caller.full) {
    if (query.tenant && *query.tenant != caller.tenant)
      co_return adminError(403, "forbidden", "tenant: a tenant token sees its own tenant's usage only (" + caller.tenant + ").");
    query.tenant = caller.tenant;
  }
  if (running_queries.fetch_add(1) >= kMaxRunning) {
    running_queries.fetch_sub(1);
    co_return adminError(503, "busy", "Two usage queries are running; try again when they are done.");
  }
  auto op = admin_store::await<QueryResult>([sink = *sink, query](std::function<void(QueryResult)> done) mutable {
    std::thread([sink = std::move(sink), query = std::move(query), done = std::move(done)]() {
      QueryResult r;
      r.ok = ledger::runUsageQuery(sink, query, r.json, r.error);
      running_queries.fetch_sub(1);
      done(std::move(r));
    }).detach();
  });
  QueryResult r = co_await std::move(op);
  if (!r.ok) co_return adminError(503, "ledger_unavailable", "The ledger did not answer: " + r.error);
  co_return AdminReply{200, std::move(r.json)};
}

}  // namespace tahua
