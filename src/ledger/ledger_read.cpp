#include "ledger/ledger_read.h"

#include <postgresql/libpq-fe.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>

namespace tahua::ledger {

double percentileCont(std::vector<double>& values, double p) {
  std::sort(values.begin(), values.end());
  const double pos = p * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

namespace {

// tahua_percentiles(x): the group's non-null values, held (bounded over the statement)
// until the group ends, then "p50 p95"; null for a group without values.
struct PercentileBudget {
  std::size_t held = 0;
  std::vector<std::unique_ptr<std::vector<double>>> groups;  // freed with the statement's connection
};

void percentileStep(sqlite3_context* ctx, int, sqlite3_value** argv) {
  auto* budget = static_cast<PercentileBudget*>(sqlite3_user_data(ctx));
  auto* slot = static_cast<std::size_t*>(sqlite3_aggregate_context(ctx, sizeof(std::size_t)));
  if (!slot) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (*slot == 0) {  // the group's first row: its values' vector
    budget->groups.push_back(std::make_unique<std::vector<double>>());
    *slot = budget->groups.size();
  }
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) return;
  if (++budget->held > kMaxPercentileValues) {
    sqlite3_result_error(ctx, "tahua: too many values for exact percentiles", -1);
    return;
  }
  budget->groups[*slot - 1]->push_back(sqlite3_value_double(argv[0]));
}

void percentileFinal(sqlite3_context* ctx) {
  auto* budget = static_cast<PercentileBudget*>(sqlite3_user_data(ctx));
  auto* slot = static_cast<std::size_t*>(sqlite3_aggregate_context(ctx, 0));
  if (!slot || *slot == 0 || budget->groups[*slot - 1]->empty()) {
    sqlite3_result_null(ctx);
    return;
  }
  std::vector<double>& v = *budget->groups[*slot - 1];
  char buf[96];
  const double p50 = percentileCont(v, 0.5), p95 = percentileCont(v, 0.95);
  std::snprintf(buf, sizeof buf, "%.17g %.17g", p50, p95);
  budget->held -= v.size();
  v.clear();
  v.shrink_to_fit();
  sqlite3_result_text(ctx, buf, -1, SQLITE_TRANSIENT);
}

std::optional<ReadFailure> readSqlite(const UsageSinkConfig& c, const ReadStatement& s, std::size_t max_rows, std::vector<Row>& rows) {
  auto fail = [&](sqlite3* db, ReadFailure::Kind kind = ReadFailure::Kind::Unavailable) {
    return ReadFailure{kind, c.path + ": " + (db ? sqlite3_errmsg(db) : "cannot open")};
  };
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(c.path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    ReadFailure f = fail(db);
    sqlite3_close(db);
    return f;
  }
  PercentileBudget budget;  // outlives the connection's statements: declared first
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> hold(db, sqlite3_close);
  sqlite3_busy_timeout(db, 5000);
  sqlite3_create_function_v2(db, "tahua_percentiles", 1, SQLITE_UTF8, &budget, nullptr, percentileStep, percentileFinal, nullptr);
  // The deadline: the progress handler is called every 10,000 virtual machine steps.
  const auto deadline = std::chrono::steady_clock::now() + kReadDeadline;
  auto past = [](void* d) -> int { return std::chrono::steady_clock::now() > *static_cast<const std::chrono::steady_clock::time_point*>(d); };
  sqlite3_progress_handler(db, 10'000, past, const_cast<std::chrono::steady_clock::time_point*>(&deadline));
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, s.sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return fail(db);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> finalize(st, sqlite3_finalize);
  for (std::size_t i = 0; i < s.params.size(); ++i)
    sqlite3_bind_text(st, static_cast<int>(i + 1), s.params[i].data(), static_cast<int>(s.params[i].size()), SQLITE_STATIC);
  int rc = SQLITE_DONE;
  while (rows.size() < max_rows && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    Row r;
    for (int i = 0; i < sqlite3_column_count(st); ++i) {
      const unsigned char* t = sqlite3_column_text(st, i);
      r.push_back(t ? Cell(reinterpret_cast<const char*>(t)) : std::nullopt);
    }
    rows.push_back(std::move(r));
  }
  if (rows.size() >= max_rows) return std::nullopt;
  if (rc == SQLITE_INTERRUPT)
    return ReadFailure{ReadFailure::Kind::Deadline, "the query ran past its " + std::to_string(kReadDeadline.count()) + " s deadline"};
  if (rc != SQLITE_DONE) {
    if (std::strstr(sqlite3_errmsg(db), "too many values for exact percentiles"))
      return ReadFailure{ReadFailure::Kind::TooManyValues, "more than " + std::to_string(kMaxPercentileValues) +
                                                               " latencies in the range for exact percentiles in SQLite"};
    return fail(db);
  }
  return std::nullopt;
}

// Read connections left open after a question that went well, at most kMaxIdle over all
// sinks (the admin API runs two questions at once at most), the oldest closed first: the
// next question skips the connect (a backend's fork, SCRAM, its catalog caches warming
// up: most of a small question's time, docs/benchmarks.md#ledger-queries). Keyed by the
// connection string and password, so a reloaded sink never gets another's connection.
class IdleReadConnections {
 public:
  static constexpr std::size_t kMaxIdle = 2;
  ~IdleReadConnections() {
    for (auto& [key, conn] : idle_) PQfinish(conn);
  }
  PGconn* take(const std::string& key) {
    std::lock_guard lock(mu_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it)
      if (it->first == key) {
        PGconn* conn = it->second;
        idle_.erase(it);
        return conn;
      }
    return nullptr;
  }
  void give(std::string key, PGconn* conn) {
    std::lock_guard lock(mu_);
    idle_.emplace_back(std::move(key), conn);
    if (idle_.size() > kMaxIdle) {
      PQfinish(idle_.front().second);
      idle_.pop_front();
    }
  }

 private:
  std::mutex mu_;
  std::deque<std::pair<std::string, PGconn*>> idle_;
};

IdleReadConnections& idleReadConnections() {
  static IdleReadConnections idle;
  return idle;
}

// `reuse`: an idle connection may answer (false: connect, the idle one having failed).
std::optional<ReadFailure> readPostgres(const UsageSinkConfig& c, const ReadStatement& s, std::size_t max_rows, std::vector<Row>& rows,
                                        bool reuse = true) {
  if (c.dsn.empty())
    return ReadFailure{ReadFailure::Kind::Unavailable, "no connection string: the variable " + c.dsn_env + " (dsn_env) was not set at start"};
  const std::string timeout = std::to_string(std::max<long long>(2, (c.timeout.count() + 999) / 1000));
  // A question bounded server-side too: a heavy one cannot hold the database. No JIT: a
  // rollup query's 180 sums cost past jit_above_cost, and compiling them took longer (~1 s)
  // than running them.
  const std::string options =
      "-c statement_timeout=" + std::to_string(kReadDeadline.count()) + "s -c default_transaction_read_only=on -c jit=off";
  std::vector<const char*> keys{"dbname", "connect_timeout", "fallback_application_name", "options"};
  std::vector<const char*> values{c.dsn.c_str(), timeout.c_str(), "tahua-query", options.c_str()};
  if (!c.password.empty()) {
    keys.push_back("password");
    values.push_back(c.password.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  const std::string pool_key = c.dsn + '\n' + c.password;
  // An idle connection if there is one; a fresh one if not, or if the idle one turns out
  // broken (the server restarted, idle_session_timeout): then the question is asked again.
  PGconn* idle = reuse ? idleReadConnections().take(pool_key) : nullptr;
  if (idle && PQstatus(idle) != CONNECTION_OK) {
    PQfinish(idle);
    idle = nullptr;
  }
  const bool reused = idle != nullptr;
  std::unique_ptr<PGconn, void (*)(PGconn*)> conn(idle ? idle : PQconnectdbParams(keys.data(), values.data(), 1), PQfinish);
  auto scrubbed = [&](const char* text) {
    std::string m = text ? text : "";
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    if (!c.password.empty())
      for (auto at = m.find(c.password); at != std::string::npos; at = m.find(c.password)) m.replace(at, c.password.size(), "***");
    // The whole connection string may hold a password too (dsn_env): never echoed.
    if (!c.dsn.empty())
      for (auto at = m.find(c.dsn); at != std::string::npos; at = m.find(c.dsn)) m.replace(at, c.dsn.size(), "***");
    return m;
  };
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    std::string error = "postgres: " + scrubbed(conn ? PQerrorMessage(conn.get()) : "out of memory");
    if (PQconninfoOption* o = PQconninfoParse(c.dsn.c_str(), nullptr)) {  // the dsn's own password, if any
      for (PQconninfoOption* p = o; p->keyword; ++p)
        if (std::string_view(p->keyword) == "password" && p->val && *p->val)
          for (auto at = error.find(p->val); at != std::string::npos; at = error.find(p->val)) error.replace(at, std::strlen(p->val), "***");
      PQconninfoFree(o);
    }
    return ReadFailure{ReadFailure::Kind::Unavailable, std::move(error)};
  }
  PQsetNoticeProcessor(conn.get(), [](void*, const char*) {}, nullptr);
  std::vector<const char*> params;
  for (const auto& p : s.params) params.push_back(p.c_str());
  std::unique_ptr<PGresult, void (*)(PGresult*)> r(
      PQexecParams(conn.get(), s.sql.c_str(), static_cast<int>(params.size()), nullptr, params.data(), nullptr, nullptr, 0), PQclear);
  if (reused && PQstatus(conn.get()) != CONNECTION_OK) {
    r.reset();
    conn.reset();
    return readPostgres(c, s, max_rows, rows, false);  // the idle connection was gone: once more, connecting
  }
  if (!r || PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    const char* state = r ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
    const std::string message = "postgres: " + scrubbed(r ? PQresultErrorMessage(r.get()) : PQerrorMessage(conn.get()));
    if (state && std::string_view(state) == "57014")
      return ReadFailure{ReadFailure::Kind::Deadline, "the query ran past its " + std::to_string(kReadDeadline.count()) + " s deadline"};
    if (state && std::string_view(state) == "22023" && message.find("time zone") != std::string::npos)
      return ReadFailure{ReadFailure::Kind::UnknownZone, message};
    return ReadFailure{ReadFailure::Kind::Unavailable, message};
  }
  for (int i = 0; i < PQntuples(r.get()) && rows.size() < max_rows; ++i) {
    Row row;
    for (int j = 0; j < PQnfields(r.get()); ++j)
      row.push_back(PQgetisnull(r.get(), i, j) ? std::nullopt : Cell(PQgetvalue(r.get(), i, j)));
    rows.push_back(std::move(row));
  }
  // Only a connection that answered, outside any transaction, is kept for the next question.
  if (PQstatus(conn.get()) == CONNECTION_OK && PQtransactionStatus(conn.get()) == PQTRANS_IDLE)
    idleReadConnections().give(pool_key, conn.release());
  return std::nullopt;
}

}  // namespace

std::optional<ReadFailure> readLedger(const UsageSinkConfig& sink, const ReadStatement& s, std::size_t max_rows, std::vector<Row>& rows) {
  return sink.type == UsageSinkConfig::Type::Postgres ? readPostgres(sink, s, max_rows, rows) : readSqlite(sink, s, max_rows, rows);
}

}  // namespace tahua::ledger
