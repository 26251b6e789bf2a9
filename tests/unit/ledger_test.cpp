// The spend ledger's pieces that need no server: the cost's decimal arithmetic, the
// schema version logic, and the SQLite ledger itself (a real file, through the library):
// exactly once per record_id, a superseding record winning in any order of arrival, a
// newer schema refused unwritten, a full database, retention. PostgreSQL is driven by
// tests/integration/ledger.test.mjs against a real server.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "config/config.h"
#include "ledger/ledger.h"
#include "ledger/ledger_record.h"
#include "ledger/ledger_schema.h"
#include "ledger/usage_query.h"

namespace tahua::ledger {
namespace ledger_test {  // named, not anonymous: eight test files compile as one unit

namespace fs = std::filesystem;

TEST(LedgerCost, DecimalToNanosIsExact) {
  EXPECT_EQ(decimalToNanos("0"), 0);
  EXPECT_EQ(decimalToNanos("1"), 1'000'000'000);
  EXPECT_EQ(decimalToNanos("0.000123"), 123'000);
  EXPECT_EQ(decimalToNanos("1.7e-05"), 17'000);
  EXPECT_EQ(decimalToNanos("1.7E-5"), 17'000);
  EXPECT_EQ(decimalToNanos("12.5"), 12'500'000'000);
  EXPECT_EQ(decimalToNanos("2e3"), 2'000'000'000'000);
  EXPECT_EQ(decimalToNanos("0.0000000005"), 1);   // half a nano-dollar: away from zero
  EXPECT_EQ(decimalToNanos("0.00000000049"), 0);
  EXPECT_EQ(decimalToNanos("1e-12"), 0);
  EXPECT_EQ(decimalToNanos("0.1234567894"), 123'456'789);
  EXPECT_EQ(decimalToNanos("0.1234567895"), 123'456'790);
  EXPECT_EQ(decimalToNanos("9.2e9"), 9'200'000'000'000'000'000);
  EXPECT_EQ(decimalToNanos("1e10"), std::nullopt);  // past int64 nano-dollars
  EXPECT_EQ(decimalToNanos("-1"), std::nullopt);
  EXPECT_EQ(decimalToNanos(""), std::nullopt);
  EXPECT_EQ(decimalToNanos("1e"), std::nullopt);
  EXPECT_EQ(decimalToNanos("abc"), std::nullopt);
  EXPECT_EQ(decimalToNanos("1.2.3"), std::nullopt);
}

TEST(LedgerSchema, PlanFollowsTheVersions) {
  EXPECT_EQ(planMigration(0, 1).action, MigrationPlan::Action::Migrate);
  EXPECT_EQ(planMigration(1, 1).action, MigrationPlan::Action::UpToDate);
  EXPECT_EQ(planMigration(2, 1).action, MigrationPlan::Action::TooNew);
  const auto p = planMigration(1, 3);
  EXPECT_EQ(p.from, 1);
  EXPECT_EQ(p.to, 3);
  for (int v = 1; v <= kSchemaVersion; ++v) {
    EXPECT_FALSE(migrationStep(Dialect::Sqlite, v).empty()) << v;
    EXPECT_FALSE(migrationStep(Dialect::Postgres, v).empty()) << v;
  }
  EXPECT_TRUE(migrationStep(Dialect::Postgres, kSchemaVersion + 1).empty());
  const std::string e = tooNewError("ledger.db", 7, 1);
  EXPECT_NE(e.find("version 7"), std::string::npos) << e;
  EXPECT_NE(e.find("(1)"), std::string::npos) << e;
  EXPECT_NE(e.find("refusing to write"), std::string::npos) << e;
  EXPECT_EQ(recordColumns(Dialect::Sqlite).size(), kColumnCount);
  EXPECT_EQ(recordColumns(Dialect::Postgres).size(), kColumnCount);
}

std::string record(const std::string& id, const std::string& extra = "", const std::string& cost = "0.000123",
                   const std::string& ts = "2026-12-05T10:00:00.000Z") {
  return "{\"record_id\":\"" + id + "\",\"request_id\":\"req-" + id.substr(0, 8) + "\",\"ts\":\"" + ts + "\",\"end_ts\":\"" + ts +
         "\",\"tenant\":\"team-a\",\"key\":\"a-main\",\"key_prefix\":null,\"api\":\"openai\",\"model\":\"gpt\",\"stream\":false,"
         "\"status\":200,\"prompt_tokens\":12,\"completion_tokens\":3,\"cost_usd\":" + cost +
         ",\"duration_ms\":1.5,\"mcp_arguments\":\"{\\\"secret\\\":1}\"" + extra + "}\n";
}
std::string id(int n) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "0193a1b2-c3d4-7e5f-8a9b-%012d", n);
  return buf;
}

class SqliteLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tahua-ledger-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    c_.type = UsageSinkConfig::Type::Sqlite;
    c_.name = "ledger";
    c_.path = (dir_ / "ledger.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A second connection, as an operator's query would be.
  std::vector<std::string> column(const std::string& sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open_v2(c_.path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    std::vector<std::string> out;
    while (st && sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      out.push_back(t ? reinterpret_cast<const char*>(t) : "NULL");
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
  }
  void execute(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(c_.path.c_str(), &db), SQLITE_OK);
    char* msg = nullptr;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg), SQLITE_OK) << (msg ? msg : "");
    sqlite3_close(db);
  }
  std::unique_ptr<Ledger> opened() {
    auto l = makeSqliteLedger(c_);
    std::string error;
    EXPECT_EQ(l->open(error), Ledger::Opened::Ok) << error;
    return l;
  }
  bool write(Ledger& l, const std::string& lines, Ledger::Written* out = nullptr) {
    Ledger::Written w;
    std::string error;
    const bool ok = l.write(lines, w, error);
    if (out) *out = w;
    return ok;
  }

  fs::path dir_;
  UsageSinkConfig c_;
};

TEST_F(SqliteLedgerTest, MigratesOnceAndItsColumnsAreTheRecordsFields) {
  {
    auto l = opened();
    EXPECT_EQ(l->foundVersion(), 0);
  }
  auto again = opened();
  EXPECT_EQ(again->foundVersion(), kSchemaVersion);
  EXPECT_EQ(column("SELECT count(*) FROM tahua_ledger_schema"), std::vector<std::string>{std::to_string(kSchemaVersion)});
  EXPECT_EQ(column("PRAGMA journal_mode"), std::vector<std::string>{"wal"});
  const auto names = column("SELECT name FROM pragma_table_info('tahua_usage_records')");
  const auto cols = recordColumns(Dialect::Sqlite);
  EXPECT_EQ(names, std::vector<std::string>(cols.begin(), cols.end()));
  const auto indexes = column("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'tahua_%' ORDER BY name");
  EXPECT_EQ(indexes, (std::vector<std::string>{"tahua_usage_records_key_ts", "tahua_usage_records_model_ts", "tahua_usage_records_supersedes",
                                               "tahua_usage_records_tenant_ts", "tahua_usage_records_ts"}));
}

TEST_F(SqliteLedgerTest, TwoOpeningOneNewFileTogetherMigrateItOnce) {
  std::unique_ptr<Ledger> a = makeSqliteLedger(c_), b = makeSqliteLedger(c_);
  Ledger::Opened ra{}, rb{};
  std::string ea, eb;
  std::thread ta([&] { ra = a->open(ea); });
  std::thread tb([&] { rb = b->open(eb); });
  ta.join();
  tb.join();
  ASSERT_EQ(ra, Ledger::Opened::Ok) << ea;
  ASSERT_EQ(rb, Ledger::Opened::Ok) << eb;
  EXPECT_EQ(std::multiset<int>({a->foundVersion(), b->foundVersion()}), (std::multiset<int>{0, kSchemaVersion}));
  EXPECT_EQ(column("SELECT count(*) FROM tahua_ledger_schema"), std::vector<std::string>{std::to_string(kSchemaVersion)});
  EXPECT_TRUE(write(*a, record(id(1))));
  EXPECT_TRUE(write(*b, record(id(2))));
  EXPECT_EQ(column("SELECT count(*) FROM tahua_usage_records"), std::vector<std::string>{"2"});
}

TEST_F(SqliteLedgerTest, EachRecordOnceWithItsCostExact) {
  auto l = opened();
  std::string batch;
  for (int i = 1; i <= 5; ++i) batch += record(id(i));
  ASSERT_TRUE(write(*l, batch));
  ASSERT_TRUE(write(*l, batch));                          // a replayed batch
  ASSERT_TRUE(write(*l, record(id(3)) + record(id(6))));  // a partial replay and one new
  EXPECT_EQ(column("SELECT count(*) FROM tahua_usage_records"), std::vector<std::string>{"6"});
  EXPECT_EQ(column("SELECT sum(cost_nano_usd) FROM tahua_usage_records"), std::vector<std::string>{"738000"});
  ASSERT_TRUE(write(*l, record(id(7), "", "1.7e-05")));
  EXPECT_EQ(column("SELECT cost_nano_usd FROM tahua_usage_records WHERE record_id = '" + id(7) + "'"), std::vector<std::string>{"17000"});
  EXPECT_EQ(column("SELECT tenant || '/' || key || '/' || stream || '/' || status || '/' || prompt_tokens || '/' || duration_ms "
                   "FROM tahua_usage_records WHERE record_id = '" + id(1) + "'"),
            std::vector<std::string>{"team-a/a-main/0/200/12/1.5"});
  EXPECT_EQ(column("SELECT count(*) FROM tahua_usage_records WHERE key_prefix IS NULL"), std::vector<std::string>{"7"});
}

TEST_F(SqliteLedgerTest, ASupersedingRecordWinsInAnyOrder) {
  auto l = opened();
  const std::string later = ",\"supersedes\":\"";
  // In order, in two deliveries.
  ASSERT_TRUE(write(*l, record(id(1), ",\"quality\":\"pending\"")));
  ASSERT_TRUE(write(*l, record(id(2), later + id(1) + "\",\"quality\":\"ok\"")));
  // The original replayed late, after its successor.
  ASSERT_TRUE(write(*l, record(id(1), ",\"quality\":\"pending\"")));
  // Successor first, then the original (a spill replayed out of order).
  ASSERT_TRUE(write(*l, record(id(4), later + id(3) + "\",\"quality\":\"low\"")));
  ASSERT_TRUE(write(*l, record(id(3), ",\"quality\":\"pending\"")));
  // Both in one delivery, either way round.
  ASSERT_TRUE(write(*l, record(id(5)) + record(id(6), later + id(5) + "\"")));
  ASSERT_TRUE(write(*l, record(id(8), later + id(7) + "\"") + record(id(7))));
  EXPECT_EQ(column("SELECT record_id FROM tahua_usage_records ORDER BY record_id"),
            (std::vector<std::string>{id(2), id(4), id(6), id(8)}));
}

TEST_F(SqliteLedgerTest, LinesThatAreNotRecordsAreLeftOutNotRetried) {
  auto l = opened();
  Ledger::Written w;
  ASSERT_TRUE(write(*l, "not json\n" + record(id(1)) + "{\"record_id\":\"x\",\"ts\":\"t\"}\n" + record(id(2), "", "-1"), &w));
  EXPECT_EQ(w.skipped, 3u);
  EXPECT_EQ(w.rows, 1u);
  EXPECT_FALSE(w.skip_reason.empty());
  EXPECT_EQ(column("SELECT count(*) FROM tahua_usage_records"), std::vector<std::string>{"1"});
}

TEST_F(SqliteLedgerTest, ANewerSchemaIsRefusedAndNotWritten) {
  { opened(); }
  execute("INSERT INTO tahua_ledger_schema (version, tahua) VALUES (" + std::to_string(kSchemaVersion + 1) + ", 'tahua 9')");
  auto l = makeSqliteLedger(c_);
  std::string error;
  EXPECT_EQ(l->open(error), Ledger::Opened::Refused);
  EXPECT_NE(error.find("newer than this tahua"), std::string::npos) << error;
  EXPECT_FALSE(write(*l, record(id(1))));
  EXPECT_EQ(column("SELECT count(*) FROM tahua_usage_records"), std::vector<std::string>{"0"});
  EXPECT_EQ(column("SELECT max(version) FROM tahua_ledger_schema"), std::vector<std::string>{std::to_string(kSchemaVersion + 1)});
}

TEST_F(SqliteLedgerTest, AFullDatabaseFailsTheWholeDeliveryAsFull) {
  c_.max_bytes = 256 * 1024;
  auto l = opened();
  std::string batch;
  std::string padding(2000, 'x');
  for (int i = 1; i <= 400; ++i) batch += record(id(i), ",\"path\":\"/" + padding + "\"");
  Ledger::Written w;
  EXPECT_FALSE(write(*l, batch, &w));
  EXPECT_TRUE(w.disk_full);
  EXPECT_EQ(column("SELECT count(*) FROM tahua_usage_records"), std::vector<std::string>{"0"}) << "rolled back whole";
  ASSERT_TRUE(write(*l, record(id(1000))));  // room for a small one: the connection still works
}

TEST_F(SqliteLedgerTest, RetentionDeletesOldRowsInBatches) {
  auto l = opened();
  std::string batch;
  for (int i = 1; i <= 25; ++i) batch += record(id(i), "", "0.1", "2025-01-01T00:00:00.000Z");
  for (int i = 26; i <= 30; ++i) batch += record(id(i), "", "0.1", "2026-12-01T00:00:00.000Z");
  ASSERT_TRUE(write(*l, batch));
  std::string error;
  EXPECT_EQ(l->prune("2026-01-01T00:00:00.000Z", 10, error), 10u);
  EXPECT_EQ(l->prune("2026-01-01T00:00:00.000Z", 10, error), 10u);
  EXPECT_EQ(l->prune("2026-01-01T00:00:00.000Z", 10, error), 5u);
  EXPECT_EQ(l->prune("2026-01-01T00:00:00.000Z", 10, error), 0u);
  EXPECT_EQ(column("SELECT count(*) FROM tahua_usage_records"), std::vector<std::string>{"5"});
}

TEST(ConfigLedgerSinks, SqliteAndPostgresSinksAreReadAndChecked) {
  const std::string base = "listeners: [{port: 0}]\nproviders: [{name: up, type: mock}]\nmodels: [{name: m, provider: up}]\n";
  ::setenv("TAHUA_UT_PG_DSN", "postgresql://tahua:s3cret-pw@db/tahua", 1);
  auto ok = loadConfigString(base + R"(usage:
  spill_dir: /tmp/s
  sinks:
    - {type: sqlite, path: /tmp/ledger.db, retention: 400d, max_bytes: 1048576}
    - {name: pg, type: postgres, dsn_env: TAHUA_UT_PG_DSN, batch: 200, timeout: 2s, retention: 30d}
)",
                             "t.yaml");
  ASSERT_TRUE(ok.config) << ok.error;
  const auto& s = ok.config->usage.sinks;
  EXPECT_EQ(s[0].type, UsageSinkConfig::Type::Sqlite);
  EXPECT_EQ(s[0].name, "sqlite");
  EXPECT_EQ(s[0].retention, Millis(400ll * 24 * 3600 * 1000));
  EXPECT_EQ(s[0].max_bytes, 1048576u);
  EXPECT_EQ(s[1].type, UsageSinkConfig::Type::Postgres);
  EXPECT_EQ(s[1].dsn, "postgresql://tahua:s3cret-pw@db/tahua");
  EXPECT_EQ(s[1].batch, 200u);
  const std::pair<const char*, const char*> bad[] = {
      {"{type: sqlite}", "usage.sinks[0].path: required"},
      {"{type: sqlite, path: x, url: \"http://h/\"}", "usage.sinks[0].url: not a setting of a sqlite sink"},
      {"{type: postgres}", "exactly one of dsn and dsn_env"},
      {"{type: postgres, dsn: \"host=db\", dsn_env: X}", "exactly one of dsn and dsn_env"},
      {"{type: postgres, dsn: \"host=db password=hunter2\"}", "holds a password"},
      {"{type: postgres, dsn: \"postgresql://u:hunter2@db/x\"}", "holds a password"},
      {"{type: postgres, dsn: \"host\"}", "not a libpq connection string"},
      {"{type: postgres, dsn: \"host=db\", path: x}", "not a setting of a postgres sink"},
      {"{type: file, path: x, retention: 1d}", "not a setting of a file sink"},
  };
  for (auto [sink, want] : bad) {
    auto r = loadConfigString(base + "usage: {spill_dir: d, sinks: [" + sink + "]}\n", "t.yaml");
    EXPECT_FALSE(r.config) << sink;
    EXPECT_NE(r.error.find(want), std::string::npos) << sink << ": " << r.error;
    EXPECT_EQ(r.error.find("hunter2"), std::string::npos) << r.error;
  }
  ::setenv("TAHUA_UT_PG_DSN", "host=db password=hunter2 port", 1);
  auto env_bad = loadConfigString(base + "usage: {spill_dir: d, sinks: [{type: postgres, dsn_env: TAHUA_UT_PG_DSN}]}\n", "t.yaml");
  EXPECT_FALSE(env_bad.config);
  EXPECT_NE(env_bad.error.find("is not a libpq connection string"), std::string::npos) << env_bad.error;
  EXPECT_EQ(env_bad.error.find("hunter2"), std::string::npos) << env_bad.error;
  ::unsetenv("TAHUA_UT_PG_DSN");
}

}  // namespace ledger_test
}  // namespace tahua::ledger

namespace tahua::ledger {
namespace ledger_test {

TEST(LedgerUsageQuery, ParametersAreCheckedAndNamed) {
  const std::string now = "2026-12-05T12:00:00.000Z";
  UsageQuery q;
  EXPECT_EQ(parseUsageQuery("from=2026-12-01&group_by=tenant%2Cmodel,day&tenant=team-a", now, q), std::nullopt);
  EXPECT_EQ(q.from, "2026-12-01T00:00:00.000Z");
  EXPECT_EQ(q.to, now);
  EXPECT_EQ(q.group_by, (std::vector<std::string>{"tenant", "model", "day"}));
  EXPECT_EQ(q.tenant, "team-a");
  UsageQuery t;
  EXPECT_EQ(parseUsageQuery("from=2026-12-01T10%3A30Z&to=2026-12-01T11:00:00.250Z", now, t), std::nullopt);
  EXPECT_EQ(t.from, "2026-12-01T10:30:00.000Z");
  EXPECT_EQ(t.to, "2026-12-01T11:00:00.250Z");
  const std::pair<const char*, const char*> bad[] = {
      {"", "from: required"},
      {"from=yesterday", "from: expected a UTC date"},
      {"from=2026-13-01", "from: expected"},
      {"from=2026-12-01T10:00+02:00", "from: expected"},
      {"from=2026-12-02&to=2026-12-01", "to: must be after from"},
      {"from=2026-12-01&group_by=tenant,colour", "group_by: unknown group \"colour\""},
      {"from=2026-12-01&group_by=day,hour", "group_by: day or hour, not both"},
      {"from=2026-12-01&group_by=model,model", "group_by: \"model\" given twice"},
      {"from=2026-12-01&tenant=", "tenant: empty"},
      {"from=2026-12-01&limit=5", "limit: unknown parameter"},
  };
  for (auto [query, want] : bad) {
    UsageQuery x;
    auto e = parseUsageQuery(query, now, x);
    ASSERT_TRUE(e) << query;
    EXPECT_EQ(e->rfind(want, 0), 0u) << query << ": " << *e;
  }
}

TEST(LedgerUsageQuery, SqlGroupsAndFiltersPerDatabase) {
  UsageQuery q;
  q.from = "2026-12-01T00:00:00.000Z";
  q.to = "2026-12-02T00:00:00.000Z";
  q.group_by = {"route", "hour"};
  q.tenant = "team-a";
  q.model = "gpt";
  const UsageSql pg = usageSql(Dialect::Postgres, q);
  EXPECT_NE(pg.sql.find("SELECT route_name, to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24\":00Z\"'), count(*)"), std::string::npos) << pg.sql;
  EXPECT_NE(pg.sql.find("WHERE ts >= $1::timestamptz AND ts < $2::timestamptz AND tenant = $3 AND model = $4 GROUP BY 1, 2 ORDER BY 1, 2 LIMIT 10001"),
            std::string::npos) << pg.sql;
  EXPECT_EQ(pg.params, (std::vector<std::string>{q.from, q.to, "team-a", "gpt"}));
  const UsageSql lite = usageSql(Dialect::Sqlite, q);
  EXPECT_NE(lite.sql.find("substr(ts, 1, 13) || ':00Z'"), std::string::npos) << lite.sql;
  EXPECT_NE(lite.sql.find("sum(cost_nano_usd)"), std::string::npos) << lite.sql;
  EXPECT_NE(lite.sql.find("tenant = ?3 AND model = ?4"), std::string::npos) << lite.sql;
  EXPECT_EQ(nanosToDecimal(0), "0");
  EXPECT_EQ(nanosToDecimal(123'456), "0.000123456");
  EXPECT_EQ(nanosToDecimal(12'500'000'000), "12.5");
  EXPECT_EQ(nanosToDecimal(3'000'000'000), "3");
}

TEST_F(SqliteLedgerTest, UsageQuerySumsPerGroupExactly) {
  auto l = opened();
  std::string batch;
  for (int i = 1; i <= 4; ++i) batch += record(id(i), "", "0.0000001", i <= 2 ? "2026-12-01T10:15:00.000Z" : "2026-12-02T09:00:00.000Z");
  batch += record(id(5), ",\"status\":429,\"tenant\":\"team-b\"", "0", "2026-12-01T11:00:00.000Z");
  ASSERT_TRUE(write(*l, batch));
  UsageQuery q;
  ASSERT_EQ(parseUsageQuery("from=2026-12-01&to=2026-12-03&group_by=tenant,day", "2026-12-05T00:00:00.000Z", q), std::nullopt);
  std::string json, error;
  ASSERT_TRUE(runUsageQuery(c_, q, json, error)) << error;
  EXPECT_EQ(json,
            "{\"from\":\"2026-12-01T00:00:00.000Z\",\"to\":\"2026-12-03T00:00:00.000Z\",\"group_by\":[\"tenant\",\"day\"],\"groups\":["
            "{\"tenant\":\"team-a\",\"day\":\"2026-12-01\",\"requests\":2,\"errors\":0,\"input_tokens\":24,\"output_tokens\":6,"
            "\"cached_tokens\":0,\"cost_usd\":0.0000002},"
            "{\"tenant\":\"team-a\",\"day\":\"2026-12-02\",\"requests\":2,\"errors\":0,\"input_tokens\":24,\"output_tokens\":6,"
            "\"cached_tokens\":0,\"cost_usd\":0.0000002},"
            "{\"tenant\":\"team-b\",\"day\":\"2026-12-01\",\"requests\":1,\"errors\":1,\"input_tokens\":12,\"output_tokens\":3,"
            "\"cached_tokens\":0,\"cost_usd\":0}],\"truncated\":false}");
}

}  // namespace ledger_test
}  // namespace tahua::ledger
