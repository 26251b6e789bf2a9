// The ledger in PostgreSQL, through libpq on the exporter's thread. Each statement runs
// under the sink's timeout (the socket polled against a deadline, the connection dropped
// past it: a stalled server never holds the exporter longer than that). A batch is one
// statement: the records as one JSON array, spread into rows by the server
// (jsonb_populate_recordset over the table's own row type, so the cost arrives as the
// record's decimal, exactly, in a numeric column).
#include <postgresql/libpq-fe.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <span>
#include <vector>

#include "core/log.h"
#include "ledger/ledger.h"
#include "ledger/ledger_record.h"
#include "ledger/ledger_rollups.h"
#include "ledger/ledger_schema.h"

namespace tahua::ledger {
namespace {

using PgClock = std::chrono::steady_clock;

// pg_advisory_xact_lock's key for migrations: "tahua" in ASCII.
constexpr const char* kMigrationLockKey = "500152706401";
constexpr Millis kMigrationTimeout{30'000};  // may wait for another replica's migration
// One step of a migration: version 2's backfill reads every row once (154-246 s for 10
// million rows on the 2-core bench machine, docs/benchmarks.md#ledger-queries).
constexpr Millis kMigrationStepTimeout{3'600'000};

// `text` with every occurrence of `secret` replaced: libpq may quote what it was given.
void scrub(std::string& text, const std::string& secret) {
  if (secret.empty()) return;
  for (std::size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3)) text.replace(at, secret.size(), "***");
}

class PostgresLedger final : public Ledger {
 public:
  explicit PostgresLedger(const UsageSinkConfig& c) : c_(c) {
    // The password inside the connection string (dsn_env), to keep it out of messages.
    if (!c_.dsn.empty())
      if (PQconninfoOption* o = PQconninfoParse(c_.dsn.c_str(), nullptr)) {
        for (PQconninfoOption* p = o; p->keyword; ++p)
          if (std::string_view(p->keyword) == "password" && p->val) dsn_password_ = p->val;
        PQconninfoFree(o);
      }
    const std::string table(kRecordsTable);
    // Rows superseded within the batch or by a row already kept are left out; the rows
    // this batch supersedes are deleted (one snapshot: the DELETE sees only what was
    // there before, the INSERT's filters cover the batch itself).
    insert_ = "WITH r AS (SELECT * FROM jsonb_populate_recordset(NULL::" + table + ", $1::jsonb)), " +
              "gone AS (DELETE FROM " + table + " u USING r WHERE u.record_id = r.supersedes) " +
              "INSERT INTO " + table + " SELECT * FROM r WHERE NOT EXISTS (SELECT 1 FROM " + table +
              " u WHERE u.supersedes = r.record_id) AND NOT EXISTS (SELECT 1 FROM r r2 WHERE r2.supersedes = r.record_id) "
              "ON CONFLICT DO NOTHING";
    prune_ = "DELETE FROM " + table + " WHERE record_id IN (SELECT record_id FROM " + table +
             " WHERE ts < $1::timestamptz LIMIT $2::integer)";
    // The rows' delete trigger took their share out of the rollups: the hours left empty go.
    const std::string rollups(kRollupTable);
    prune_rollups_ = "DELETE FROM " + rollups + " WHERE (hour, tenant, model, route_name) IN (SELECT hour, tenant, model, route_name FROM " +
                     rollups + " WHERE hour < $1::timestamptz AND requests = 0 LIMIT $2::integer)";
  }
  ~PostgresLedger() override { drop(); }

  bool isOpen() const override { return conn_ != nullptr; }

  Opened open(std::string& error) override {
    if (conn_) return Opened::Ok;
    if (c_.dsn.empty()) {
      error = "no connection string: the variable " + c_.dsn_env + " (dsn_env) was not set at start";
      return Opened::Unreachable;
    }
    const std::string connect_timeout = std::to_string(std::max<long long>(2, (c_.timeout.count() + 999) / 1000));
    std::vector<const char*> keys{"dbname", "connect_timeout", "fallback_application_name"};
    std::vector<const char*> values{c_.dsn.c_str(), connect_timeout.c_str(), "tahua"};
    if (!c_.password.empty()) {
      keys.push_back("password");
      values.push_back(c_.password.c_str());
    }
    keys.push_back(nullptr);
    values.push_back(nullptr);
    conn_ = PQconnectdbParams(keys.data(), values.data(), 1);
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
      error = message(conn_ ? PQerrorMessage(conn_) : "out of memory");
      drop();
      return Opened::Unreachable;
    }
    PQsetnonblocking(conn_, 1);
    // libpq prints the server's notices (CREATE TABLE IF NOT EXISTS's "already exists")
    // on stderr by default: the log is JSON lines, and they say nothing an operator needs.
    PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
    Opened m = migrate(error);
    // The server gives up on a statement a second after this side does (a lock wait
    // included): an abandoned insert does not run on, holding a connection, after the
    // client left.
    if (m == Opened::Ok && !simple("SET statement_timeout = " + std::to_string(c_.timeout.count() + 1000), error))
      m = Opened::Unreachable;
    if (m != Opened::Ok) drop();
    return m;
  }

  bool write(std::string_view lines, Written& w, std::string& error) override {
    if (open(error) != Opened::Ok) return false;
    ParsedRecord rec;
    std::string why;
    std::vector<std::string_view> chunk;
    for (std::size_t pos = 0; pos < lines.size();) {
      std::size_t end = lines.find('\n', pos);
      if (end == std::string_view::npos) end = lines.size();
      const std::string_view line = lines.substr(pos, end - pos);
      pos = end + 1;
      if (line.empty()) continue;
      // Checked here: one malformed line would make the server refuse its whole batch.
      if (!reader_.parse(line, rec, why)) {
        if (w.skipped++ == 0) w.skip_reason = why;
        continue;
      }
      chunk.push_back(line);
      if (chunk.size() >= c_.batch && !insert(chunk, w, error)) return false;
    }
    return insert(chunk, w, error);
  }
  std::optional<std::size_t> prune(std::string_view cutoff, std::size_t limit, std::string& error) override {
    if (!conn_) return std::nullopt;
    const std::string when(cutoff), n = std::to_string(limit);
    const char* params[] = {when.c_str(), n.c_str()};
    std::size_t deleted = 0, emptied = 0;
    if (!run(prune_, params, c_.timeout, nullptr, &deleted, error)) return std::nullopt;
    if (!run(prune_rollups_, params, c_.timeout, nullptr, &emptied, error)) return std::nullopt;
    return deleted;
  }

 private:
  std::string message(const char* text) const {
    std::string m = text ? text : "";
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    for (std::size_t at; (at = m.find('\n')) != std::string::npos;) m[at] = ' ';
    scrub(m, c_.password);
    scrub(m, dsn_password_);
    return m;
  }

  void drop() {
    if (conn_) PQfinish(conn_);
    conn_ = nullptr;
  }

  // Waits for the socket to be ready for `events` until `deadline`.
  bool await(short events, PgClock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - PgClock::now()).count();
    if (left <= 0) return false;
    pollfd p{PQsocket(conn_), events, 0};
    int rc;
    do rc = ::poll(&p, 1, static_cast<int>(left));
    while (rc < 0 && errno == EINTR);
    return rc > 0;
  }

  // One statement with text parameters, within `timeout`. `value`: the first row's first
  // column; `affected`: the rows it changed. False: `error` (the connection is dropped
  // when it broke or timed out).
  bool run(const std::string& sql, std::span<const char* const> params, Millis timeout, std::string* value, std::size_t* affected,
           std::string& error) {
    const auto deadline = PgClock::now() + timeout;
    sqlstate_.clear();
    if (!PQsendQueryParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr, params.data(), nullptr, nullptr, 0)) {
      error = message(PQerrorMessage(conn_));
      drop();
      return false;
    }
    for (;;) {  // the query out (nonblocking: a large batch may take several writes)
      const int f = PQflush(conn_);
      if (f == 0) break;
      if (f < 0 || !await(POLLOUT | POLLIN, deadline) || !PQconsumeInput(conn_)) return broken(f < 0 ? nullptr : "timed out sending", timeout, error);
    }
    bool ok = true;
    for (;;) {
      while (PQisBusy(conn_)) {
        if (!await(POLLIN, deadline)) return broken("timed out waiting for the server", timeout, error);
        if (!PQconsumeInput(conn_)) return broken(nullptr, timeout, error);
      }
      PGresult* r = PQgetResult(conn_);
      if (!r) break;
      const ExecStatusType st = PQresultStatus(r);
      if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        if (ok) {
          error = message(PQresultErrorMessage(r));
          const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
          sqlstate_ = state ? state : "";
        }
        ok = false;
      } else {
        if (value && PQntuples(r) > 0 && PQnfields(r) > 0) *value = PQgetvalue(r, 0, 0);
        if (affected) *affected = static_cast<std::size_t>(std::strtoull(PQcmdTuples(r), nullptr, 10));
      }
      PQclear(r);
    }
    if (!ok && PQstatus(conn_) != CONNECTION_OK) drop();
    return ok;
  }

  // One statement for `lines` (then cleared). A record the server refuses as data (a
  // \u0000 in a string, a value out of a column's range: SQLSTATE classes 22 and 23)
  // would fail its batch on every replay: the batch is then sent a record at a time and
  // the refused ones are left out (counted as skipped), never retried for ever.
  bool insert(std::vector<std::string_view>& lines, Written& w, std::string& error) {
    if (lines.empty()) return true;
    auto arrayOf = [](std::span<const std::string_view> part) {
      std::string a = "[";
      for (std::string_view l : part) {
        a.append(l);
        a.push_back(',');
      }
      a.back() = ']';
      return a;
    };
    auto refusedAsData = [&] { return conn_ && (sqlstate_.starts_with("22") || sqlstate_.starts_with("23")); };
    std::string array = arrayOf(lines);
    const char* params[] = {array.c_str()};
    if (run(insert_, params, c_.timeout, nullptr, nullptr, error)) {
      w.rows += lines.size();
      lines.clear();
      return true;
    }
    if (!refusedAsData()) return false;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      array = arrayOf(std::span<const std::string_view>(&lines[i], 1));
      params[0] = array.c_str();
      std::string refused;
      if (run(insert_, params, c_.timeout, nullptr, nullptr, refused)) {
        ++w.rows;
      } else if (refusedAsData()) {
        if (w.skipped++ == 0) w.skip_reason = "refused by the server: " + refused;
      } else {
        error = refused;
        return false;
      }
    }
    lines.clear();
    error.clear();
    return true;
  }

  bool broken(const char* why, Millis timeout, std::string& error) {
    error = why ? std::string(why) + " (" + std::to_string(timeout.count()) + " ms)" : message(PQerrorMessage(conn_));
    drop();  // a statement may still run server-side; its transaction dies with the connection
    return false;
  }

  bool simple(const std::string& sql, std::string& error, std::string* value = nullptr, Millis timeout = kMigrationTimeout) {
    return run(sql, {}, timeout, value, nullptr, error);
  }

  // In one transaction under an advisory lock: replicas starting together against an
  // empty database migrate it once, the others wait and find it done. PostgreSQL's DDL
  // is transactional: a failed step leaves the database as it was.
  Opened migrate(std::string& error) {
    auto refuse = [&](Opened r) {
      if (conn_) {
        std::string ignored;
        simple("ROLLBACK", ignored);
      }
      return conn_ ? r : Opened::Unreachable;
    };
    std::string found;
    if (!simple("BEGIN", error) || !simple(std::string("SELECT pg_advisory_xact_lock(") + kMigrationLockKey + ")", error) ||
        !simple("CREATE TABLE IF NOT EXISTS " + std::string(kVersionTable) +
                    " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now(), tahua text NOT NULL)",
                error) ||
        !simple("SELECT coalesce(max(version), 0) FROM " + std::string(kVersionTable), error, &found))
      return refuse(Opened::Refused);
    found_version_ = std::atoi(found.c_str());
    const MigrationPlan plan = planMigration(found_version_);
    if (plan.action == MigrationPlan::Action::TooNew) {
      error = tooNewError("postgres", plan.from);
      return refuse(Opened::Refused);
    }
    for (int v = plan.from + 1; v <= plan.to; ++v) {
      for (std::string_view step : migrationStep(Dialect::Postgres, v))
        if (!simple(std::string(step), error, nullptr, kMigrationStepTimeout)) {
          error = "migrating to version " + std::to_string(v) + ": " + error;
          return refuse(Opened::Refused);
        }
      if (!simple("INSERT INTO " + std::string(kVersionTable) + " (version, tahua) VALUES (" + std::to_string(v) +
                      ", 'tahua " TAHUA_VERSION "')",
                  error))
        return refuse(Opened::Refused);
    }
    if (!simple("COMMIT", error)) return refuse(Opened::Unreachable);
    if (plan.action == MigrationPlan::Action::Migrate) log::info("ledger schema migrated", {{"database", "postgres"}, {"from", plan.from}, {"to", plan.to}});
    return Opened::Ok;
  }

  UsageSinkConfig c_;
  std::string dsn_password_;
  std::string insert_, prune_, prune_rollups_;
  PGconn* conn_ = nullptr;
  std::string sqlstate_;  // of the last statement that failed on the server
  RecordReader reader_;
};

}  // namespace

std::unique_ptr<Ledger> makePostgresLedger(const UsageSinkConfig& c) { return std::make_unique<PostgresLedger>(c); }

}  // namespace tahua::ledger
