// The ledger in one SQLite file: WAL (readers, such as the sqlite3 CLI or a query, never
// block the writer), synchronous=FULL (a delivered batch survives a power cut, as the
// spill does), each delivery one transaction of prepared inserts.
#include <sqlite3.h>

#include "core/log.h"
#include "ledger/ledger.h"
#include "ledger/ledger_record.h"
#include "ledger/ledger_rollups.h"
#include "ledger/ledger_schema.h"

namespace tahua::ledger {
namespace {

struct SqliteStatement {
  sqlite3_stmt* s = nullptr;
  SqliteStatement() = default;
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;
  ~SqliteStatement() { sqlite3_finalize(s); }
  void reset() {
    sqlite3_finalize(s);
    s = nullptr;
  }
};

class SqliteLedger final : public Ledger {
 public:
  explicit SqliteLedger(const UsageSinkConfig& c) : c_(c) {}
  ~SqliteLedger() override { close(); }

  bool isOpen() const override { return db_ != nullptr; }

  Opened open(std::string& error) override {
    if (db_) return Opened::Ok;
    if (sqlite3_open_v2(c_.path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
      error = c_.path + ": " + (db_ ? sqlite3_errmsg(db_) : "cannot open");
      close();
      return Opened::Unreachable;
    }
    sqlite3_busy_timeout(db_, 5000);  // a reader's checkpoint or `tahua --migrate` of another process
    std::string mode;
    if (!query("PRAGMA journal_mode=WAL", mode, error) || mode != "wal") {
      if (error.empty()) error = c_.path + ": cannot use WAL (journal_mode " + mode + ")";
      close();
      return Opened::Unreachable;
    }
    if (!exec("PRAGMA synchronous=FULL", error)) return fail();
    if (c_.max_bytes > 0) {
      std::string page;
      if (!query("PRAGMA page_size", page, error)) return fail();
      const std::uint64_t pages = std::max<std::uint64_t>(1, c_.max_bytes / std::max<std::uint64_t>(1, std::stoull(page)));
      std::string set;
      if (!query(("PRAGMA max_page_count=" + std::to_string(pages)).c_str(), set, error)) return fail();
    }
    const Opened m = migrate(error);
    if (m != Opened::Ok) {
      close();
      return m;
    }
    return prepare(error) ? Opened::Ok : fail();
  }

  bool write(std::string_view lines, Written& w, std::string& error) override {
    if (open(error) != Opened::Ok) return false;
    if (!exec("BEGIN IMMEDIATE", error)) return failWrite(w);
    ParsedRecord rec;
    std::string why;
    std::size_t rows = 0;
    for (std::size_t pos = 0; pos < lines.size();) {
      std::size_t end = lines.find('\n', pos);
      if (end == std::string_view::npos) end = lines.size();
      const std::string_view line = lines.substr(pos, end - pos);
      pos = end + 1;
      if (line.empty()) continue;
      if (!reader_.parse(line, rec, why)) {
        if (w.skipped++ == 0) w.skip_reason = why;
        continue;
      }
      sqlite3_reset(insert_.s);
      sqlite3_clear_bindings(insert_.s);
      for (std::size_t i = 0; i < rec.columns.size(); ++i) {
        const ColumnValue& v = rec.columns[i];
        const int at = static_cast<int>(i) + 1;
        switch (v.kind) {
          case ColumnValue::Kind::Null: break;
          case ColumnValue::Kind::Int: sqlite3_bind_int64(insert_.s, at, v.i); break;
          case ColumnValue::Kind::Real: sqlite3_bind_double(insert_.s, at, v.d); break;
          case ColumnValue::Kind::Text:
            sqlite3_bind_text(insert_.s, at, v.text.data(), static_cast<int>(v.text.size()), SQLITE_STATIC);
            break;
        }
      }
      if (sqlite3_step(insert_.s) != SQLITE_DONE) return failStep(insert_.s, w, error);
      sqlite3_reset(insert_.s);
      if (!rec.supersedes.empty()) {
        // The record it replaces goes (insert() keeps it from coming back).
        sqlite3_reset(remove_.s);
        sqlite3_bind_text(remove_.s, 1, rec.supersedes.data(), static_cast<int>(rec.supersedes.size()), SQLITE_STATIC);
        if (sqlite3_step(remove_.s) != SQLITE_DONE) return failStep(remove_.s, w, error);
        sqlite3_reset(remove_.s);
      }
      ++rows;
    }
    if (!exec("COMMIT", error)) return failWrite(w);
    w.rows += rows;
    return true;
  }

  std::optional<std::size_t> prune(std::string_view cutoff, std::size_t limit, std::string& error) override {
    if (!db_) return std::nullopt;
    sqlite3_reset(prune_.s);
    sqlite3_bind_text(prune_.s, 1, cutoff.data(), static_cast<int>(cutoff.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(prune_.s, 2, static_cast<sqlite3_int64>(limit));
    const int rc = sqlite3_step(prune_.s);
    sqlite3_reset(prune_.s);
    if (rc != SQLITE_DONE) {
      error = c_.path + ": retention: " + sqlite3_errmsg(db_);
      return std::nullopt;
    }
    const auto deleted = static_cast<std::size_t>(sqlite3_changes(db_));
    // The rows' delete trigger took their share out of the rollups: the hours left empty go.
    sqlite3_reset(prune_rollups_.s);
    sqlite3_bind_text(prune_rollups_.s, 1, cutoff.data(), static_cast<int>(cutoff.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(prune_rollups_.s, 2, static_cast<sqlite3_int64>(limit));
    const int rc2 = sqlite3_step(prune_rollups_.s);
    sqlite3_reset(prune_rollups_.s);
    if (rc2 != SQLITE_DONE) {
      error = c_.path + ": retention: " + sqlite3_errmsg(db_);
      return std::nullopt;
    }
    return deleted;
  }

 private:
  Opened fail() {
    close();
    return Opened::Unreachable;
  }

  // Rolls the delivery back. A full disk or a busy lock leave the connection as it is;
  // anything else (an I/O error, the file replaced) opens it afresh next time.
  bool failWrite(Written& w) {
    if (!db_) return false;
    const int code = sqlite3_errcode(db_) & 0xff;
    w.disk_full = w.disk_full || code == SQLITE_FULL;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    if (code != SQLITE_FULL && code != SQLITE_BUSY) close();
    return false;
  }

  bool failStep(sqlite3_stmt* s, Written& w, std::string& error) {
    error = c_.path + ": " + sqlite3_errmsg(db_);
    sqlite3_reset(s);  // keeps the step's error code for failWrite
    return failWrite(w);
  }

  void close() {
    insert_.reset();
    remove_.reset();
    prune_.reset();
    prune_rollups_.reset();
    if (db_) sqlite3_close_v2(db_);
    db_ = nullptr;
  }

  bool exec(const char* sql, std::string& error) {
    char* msg = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) == SQLITE_OK) return true;
    error = c_.path + ": " + (msg ? msg : sqlite3_errmsg(db_));
    sqlite3_free(msg);
    return false;
  }

  // The first column of the first row of `sql`, as text ("" when none).
  bool query(const char* sql, std::string& out, std::string& error) {
    SqliteStatement st;
    if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) {
      error = c_.path + ": " + sqlite3_errmsg(db_);
      return false;
    }
    const int rc = sqlite3_step(st.s);
    if (rc == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st.s, 0);
      out = t ? reinterpret_cast<const char*>(t) : "";
      return true;
    }
    if (rc == SQLITE_DONE) {
      out.clear();
      return true;
    }
    error = c_.path + ": " + sqlite3_errmsg(db_);
    return false;
  }

  // BEGIN IMMEDIATE takes the write lock first: two processes opening one new file
  // migrate it once, the second finding it done.
  Opened migrate(std::string& error) {
    if (!exec("BEGIN IMMEDIATE", error)) return Opened::Unreachable;
    auto rollback = [&](Opened r) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return r;
    };
    const std::string create = "CREATE TABLE IF NOT EXISTS " + std::string(kVersionTable) +
                               " (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT "
                               "(strftime('%Y-%m-%dT%H:%M:%fZ','now')), tahua TEXT NOT NULL)";
    std::string found;
    if (!exec(create.c_str(), error) ||
        !query(("SELECT coalesce(max(version), 0) FROM " + std::string(kVersionTable)).c_str(), found, error))
      return rollback(Opened::Refused);
    found_version_ = std::stoi(found.empty() ? "0" : found);
    const MigrationPlan plan = planMigration(found_version_);
    if (plan.action == MigrationPlan::Action::TooNew) {
      error = tooNewError(c_.path, plan.from);
      return rollback(Opened::Refused);
    }
    for (int v = plan.from + 1; v <= plan.to; ++v) {
      for (std::string_view step : migrationStep(Dialect::Sqlite, v))
        if (!exec(std::string(step).c_str(), error)) {
          error = "migrating to version " + std::to_string(v) + ": " + error;
          return rollback(Opened::Refused);
        }
      const std::string mark = "INSERT INTO " + std::string(kVersionTable) + " (version, tahua) VALUES (" + std::to_string(v) +
                               ", 'tahua " TAHUA_VERSION "')";
      if (!exec(mark.c_str(), error)) return rollback(Opened::Refused);
    }
    if (!exec("COMMIT", error)) return rollback(Opened::Unreachable);
    if (plan.action == MigrationPlan::Action::Migrate)
      log::info("ledger schema migrated", {{"database", c_.path}, {"from", plan.from}, {"to", plan.to}});
    return Opened::Ok;
  }

  bool prepare(std::string& error) {
    const auto cols = recordColumns(Dialect::Sqlite);
    std::string names, params;
    for (std::size_t i = 0; i < cols.size(); ++i) {
      if (i) {
        names += ", ";
        params += ", ";
      }
      names += cols[i];
      params += '?';
      params += std::to_string(i + 1);
    }
    const std::string table(kRecordsTable);
    // A record already replaced by a later one (its supersedes) is not taken again; the
    // WHERE also keeps SQLite's parser from reading ON CONFLICT as a join's.
    const std::string insert = "INSERT INTO " + table + " (" + names + ") SELECT " + params + " WHERE NOT EXISTS (SELECT 1 FROM " +
                               table + " WHERE supersedes = ?1) ON CONFLICT (record_id) DO NOTHING";
    const std::string remove = "DELETE FROM " + table + " WHERE record_id = ?1";
    const std::string prune = "DELETE FROM " + table + " WHERE rowid IN (SELECT rowid FROM " + table + " WHERE ts < ?1 LIMIT ?2)";
    const std::string rollups(kRollupTable);
    const std::string prune_rollups = "DELETE FROM " + rollups + " WHERE (hour, tenant, model, route_name) IN (SELECT hour, tenant, model, route_name FROM " +
                                      rollups + " WHERE hour < ?1 AND requests = 0 LIMIT ?2)";
    for (auto [sql, st] : {std::pair{&insert, &insert_}, std::pair{&remove, &remove_}, std::pair{&prune, &prune_},
                           std::pair{&prune_rollups, &prune_rollups_}})
      if (sqlite3_prepare_v3(db_, sql->c_str(), -1, SQLITE_PREPARE_PERSISTENT, &st->s, nullptr) != SQLITE_OK) {
        error = c_.path + ": " + sqlite3_errmsg(db_);
        return false;
      }
    return true;
  }

  UsageSinkConfig c_;
  sqlite3* db_ = nullptr;
  SqliteStatement insert_, remove_, prune_, prune_rollups_;
  RecordReader reader_;
};

}  // namespace

std::unique_ptr<Ledger> makeSqliteLedger(const UsageSinkConfig& c) { return std::make_unique<SqliteLedger>(c); }

}  // namespace tahua::ledger
