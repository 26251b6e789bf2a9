// The spend ledger's pieces that need no server: the cost's decimal arithmetic, the
// schema version logic, and the SQLite ledger itself (a real file, through the library):
// exactly once per record_id, a superseding record winning in any order of arrival, a
// newer schema refused unwritten, a full database, retention. PostgreSQL is driven by
// tests/integration/ledger.test.mjs against a real server.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "config/config.h"
#include "ledger/ledger.h"
#include "ledger/ledger_record.h"
#include "ledger/ledger_rollups.h"
#include "ledger/ledger_schema.h"
#include "ledger/request_log.h"
#include "ledger/text_format.h"
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
  EXPECT_EQ(indexes, (std::vector<std::string>{"tahua_usage_hourly_tenant", "tahua_usage_records_key_ts", "tahua_usage_records_model_ts", "tahua_usage_records_supersedes",
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
  UsageAnswer a;
  auto failed = runUsageQuery(c_, q, AnswerFormat::Json, a);
  ASSERT_FALSE(failed) << failed->message;
  const std::string& json = a.body;
  EXPECT_EQ(json,
            "{\"from\":\"2026-12-01T00:00:00.000Z\",\"to\":\"2026-12-03T00:00:00.000Z\",\"group_by\":[\"tenant\",\"day\"],"
            "\"percentiles\":\"histogram\",\"groups\":["
            "{\"tenant\":\"team-a\",\"day\":\"2026-12-01\",\"requests\":2,\"errors\":0,\"input_tokens\":24,\"output_tokens\":6,"
            "\"cached_tokens\":0,\"cost_usd\":0.0000002,\"cache_hits\":0,\"cache_tokens_saved\":0"
            ",\"latency_p50_ms\":1.542,\"latency_p95_ms\":1.542,\"ttft_p50_ms\":null,\"ttft_p95_ms\":null},"
            "{\"tenant\":\"team-a\",\"day\":\"2026-12-02\",\"requests\":2,\"errors\":0,\"input_tokens\":24,\"output_tokens\":6,"
            "\"cached_tokens\":0,\"cost_usd\":0.0000002,\"cache_hits\":0,\"cache_tokens_saved\":0"
            ",\"latency_p50_ms\":1.542,\"latency_p95_ms\":1.542,\"ttft_p50_ms\":null,\"ttft_p95_ms\":null},"
            "{\"tenant\":\"team-b\",\"day\":\"2026-12-01\",\"requests\":1,\"errors\":1,\"input_tokens\":12,\"output_tokens\":3,"
            "\"cached_tokens\":0,\"cost_usd\":0,\"cache_hits\":0,\"cache_tokens_saved\":0"
            ",\"latency_p50_ms\":1.542,\"latency_p95_ms\":1.542,\"ttft_p50_ms\":null,\"ttft_p95_ms\":null}],\"truncated\":false}");
}


TEST(LedgerTextFormat, CsvCellsAreQuotedAndNeutralised) {
  Table t;
  t.columns = {{"tenant", Table::Kind::Text}, {"requests", Table::Kind::Literal}};
  t.rows = {{std::string("=cmd|' /C calc'!A0"), std::string("3")},
            {std::string("a,\"b\"\nc"), std::nullopt},
            {std::string("+1"), std::string("-2")},
            {std::string("@x"), std::string("0")},
            {std::string("-y,z"), std::string("1")},
            {std::nullopt, std::string("4")}};
  EXPECT_EQ(tableCsv(t),
            "tenant,requests\r\n'=cmd|' /C calc'!A0,3\r\n\"a,\"\"b\"\"\nc\",\r\n'+1,-2\r\n'@x,0\r\n\"'-y,z\",1\r\n,4\r\n");
  std::string json;
  appendJsonRows(json, t);
  EXPECT_EQ(json.rfind("[{\"tenant\":\"=cmd|' /C calc'!A0\",\"requests\":3},{", 0), 0u) << json;  // JSON keeps it as it is
}

TEST(LedgerTextFormat, CursorsTimesAndNumbers) {
  for (std::string s : {"", "a", "ab", "abc", "abcd", "2026-12-05T10:00:00.123Z|0193a1b2-c3d4-7e5f-8a9b-000000000001"})
    EXPECT_EQ(unbase64Url(base64Url(s)), s);
  EXPECT_EQ(unbase64Url("a+b/"), std::nullopt);
  EXPECT_EQ(unbase64Url("abcde"), std::nullopt);
  const std::string c = encodeCursor("2026-12-05T10:00:00.123Z", id(7));
  EXPECT_EQ(decodeCursor(c), (std::pair<std::string, std::string>{"2026-12-05T10:00:00.123Z", id(7)}));
  EXPECT_EQ(decodeCursor("bm9wZQ"), std::nullopt);  // "nope"
  EXPECT_EQ(decodeCursor(base64Url("2026-12-05T10:00:00.123Z|x' OR 1=1")), std::nullopt);
  EXPECT_EQ(isoToMillis("1970-01-01T00:00:01.500Z"), 1500);
  EXPECT_EQ(millisToIso(*isoToMillis("2026-02-28T23:59:59.999Z") + 1), "2026-03-01T00:00:00.000Z");
  EXPECT_EQ(formatMillis(12.5), "12.5");
  EXPECT_EQ(formatMillis(210), "210");
  EXPECT_EQ(formatMillis(0.0004), "0");
  std::vector<double> v{4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentileCont(v, 0.5), 2.5);  // PostgreSQL: percentile_cont(0.5) of 1..4
  EXPECT_DOUBLE_EQ(percentileCont(v, 0.95), 3.85);
  std::vector<double> one{7};
  EXPECT_DOUBLE_EQ(percentileCont(one, 0.95), 7);
}

TEST(LedgerUsageQuery, ZonesAndTheLongestRange) {
  const std::string now = "2026-12-05T12:00:00.000Z";
  UsageQuery q;
  ASSERT_EQ(parseUsageQuery("from=2026-11-01&to=2026-12-01T00:00:00Z&group_by=day&tz=Europe%2FBerlin", now, q), std::nullopt);
  EXPECT_EQ(q.tz, "Europe/Berlin");
  EXPECT_TRUE(q.from_local);
  EXPECT_FALSE(q.to_local);
  const UsageSql pg = usageSql(Dialect::Postgres, q);
  EXPECT_NE(pg.sql.find("to_char(ts AT TIME ZONE $3::text, 'YYYY-MM-DD')"), std::string::npos) << pg.sql;
  EXPECT_NE(pg.sql.find("WHERE ts >= ($1::timestamp AT TIME ZONE $3::text) AND ts < $2::timestamptz"), std::string::npos) << pg.sql;
  EXPECT_NE(pg.sql.find("percentile_cont(ARRAY[0.5, 0.95]::float8[]) WITHIN GROUP (ORDER BY duration_ms)"), std::string::npos);
  EXPECT_EQ(pg.params, (std::vector<std::string>{"2026-11-01", "2026-12-01T00:00:00.000Z", "Europe/Berlin"}));
  EXPECT_EQ(zoneRefusal(Dialect::Postgres, q), std::nullopt);
  ASSERT_TRUE(zoneRefusal(Dialect::Sqlite, q));
  EXPECT_EQ(zoneRefusal(Dialect::Sqlite, q)->rfind("tz: ", 0), 0u);
  UsageQuery utc;
  ASSERT_EQ(parseUsageQuery("from=2026-11-01&tz=UTC", now, utc), std::nullopt);
  EXPECT_EQ(zoneRefusal(Dialect::Sqlite, utc), std::nullopt);
  const std::pair<const char*, const char*> bad[] = {
      {"from=2026-11-01&tz=Europe/Berlin'", "tz: expected an IANA"},
      {"from=2026-11-01&tz=", "tz: expected"},
      {"from=2025-01-01", "to: the range is longer than the ledger's query_max_range (366d"},
  };
  for (auto [query, want] : bad) {
    UsageQuery x;
    auto e = parseUsageQuery(query, now, x, std::chrono::hours(24 * 366));
    ASSERT_TRUE(e) << query;
    EXPECT_EQ(e->rfind(want, 0), 0u) << query << ": " << *e;
  }
}

TEST(LedgerRequestLog, ParametersAndTheKeysetStatement) {
  const std::string now = "2026-12-05T12:00:00.000Z";
  RequestLogQuery q;
  ASSERT_EQ(parseRequestLogQuery("tenant=team-a&status=5xx&limit=2&cursor=" + encodeCursor("2026-12-05T10:00:00.000Z", id(3)), now, q,
                                 std::chrono::hours(24)),
            std::nullopt);
  EXPECT_EQ(q.from, "2026-12-04T12:00:00.000Z");  // to minus the longest range
  EXPECT_EQ(q.to, now);
  EXPECT_EQ(q.limit, 2u);
  const ReadStatement pg = requestLogSql(Dialect::Postgres, q);
  EXPECT_NE(pg.sql.find("AND status >= 500 AND status <= 599 AND ts <= $4::timestamptz AND (ts < $4::timestamptz OR record_id < $5::uuid) "
                        "ORDER BY ts DESC, record_id DESC LIMIT 3"),
            std::string::npos) << pg.sql;
  EXPECT_EQ(pg.sql.find("prompt_tokens,"), pg.sql.find("prompt_tokens, completion_tokens"));  // counts, never text
  EXPECT_EQ(pg.sql.find(" prompt,"), pg.sql.find(" prompt, guardrails"));                      // the template's name
  const std::pair<const char*, const char*> bad[] = {
      {"limit=0", "limit: expected 1 to 1000"},
      {"limit=1001", "limit: expected 1 to 1000"},
      {"limit=ten", "limit: expected"},
      {"status=200x", "status: expected"},
      {"status=6xx", "status: expected"},
      {"cursor=%%%", "cursor: not a cursor"},
      {"cursor=bm9wZQ", "cursor: not a cursor"},
      {"from=2026-12-01T25:00Z", "from: expected"},
      {"from=2026-01-01", "to: the range is longer"},
      {"prompt=x", "prompt: unknown parameter"},
  };
  for (auto [query, want] : bad) {
    RequestLogQuery x;
    auto e = parseRequestLogQuery(query, now, x, std::chrono::hours(24 * 30));
    ASSERT_TRUE(e) << query;
    EXPECT_EQ(e->rfind(want, 0), 0u) << query << ": " << *e;
  }
  EXPECT_TRUE(validRecordId(id(1)));
  EXPECT_FALSE(validRecordId("0193a1b2-c3d4-7e5f-8a9b-00000000000g"));
  EXPECT_FALSE(validRecordId("1' OR '1'='1"));
}

TEST_F(SqliteLedgerTest, RequestLogPagesEveryRowOnceNewestFirst) {
  auto l = opened();
  std::string batch;
  // 7 records, two sharing a ts (the keyset's tie on record_id), one of another tenant.
  for (int i = 1; i <= 7; ++i) {
    char ts[32];
    std::snprintf(ts, sizeof ts, "2026-12-05T10:00:0%d.000Z", i == 5 ? 4 : i);
    batch += record(id(i), i == 6 ? ",\"tenant\":\"team-b\"" : "", "0.000001", ts);
  }
  ASSERT_TRUE(write(*l, batch));
  std::vector<std::string> seen;
  std::string cursor;
  for (int page = 0; page < 10; ++page) {
    RequestLogQuery q;
    ASSERT_EQ(parseRequestLogQuery("from=2026-12-05&limit=2&tenant=team-a" + (cursor.empty() ? "" : "&cursor=" + cursor),
                                   "2026-12-06T00:00:00.000Z", q, {}),
              std::nullopt);
    RequestLogAnswer a;
    auto failed = runRequestLog(c_, q, AnswerFormat::Json, a);
    ASSERT_FALSE(failed) << failed->message;
    for (std::size_t at = a.body.find("\"record_id\":\""); at != std::string::npos; at = a.body.find("\"record_id\":\"", at + 1))
      seen.push_back(a.body.substr(at + 13, 36));
    EXPECT_NE(a.body.find("\"cost_usd\":0.000001"), std::string::npos) << a.body;
    EXPECT_EQ(a.body.find("secret"), std::string::npos) << "never the mcp arguments";
    cursor = a.next_cursor;
    if (cursor.empty()) break;
  }
  EXPECT_EQ(seen, (std::vector<std::string>{id(7), id(5), id(4), id(3), id(2), id(1)}));
  RequestLogAnswer one;
  ASSERT_FALSE(runRequestDetail(c_, id(6), std::string("team-a"), AnswerFormat::Json, one));
  EXPECT_FALSE(one.found) << "another tenant's record";
  ASSERT_FALSE(runRequestDetail(c_, id(6), std::nullopt, AnswerFormat::Csv, one));
  EXPECT_TRUE(one.found);
  EXPECT_EQ(one.body.substr(0, 40), "record_id,request_id,trace_id,ts,end_ts,");
  EXPECT_NE(one.body.find("team-b"), std::string::npos);
}

TEST_F(SqliteLedgerTest, PercentilesAreExactPerGroup) {
  auto l = opened();
  std::string batch;
  // team-a: durations 1..20 ms, streams with ttft 10..200; team-b: one record without a duration.
  // record() says stream false and 1.5 ms: those fields are rewritten, not repeated.
  auto with = [](std::string r, const std::string& duration, bool stream) {
    r.replace(r.find("\"duration_ms\":1.5"), 17, "\"duration_ms\":" + duration);
    if (stream) r.replace(r.find("\"stream\":false"), 14, "\"stream\":true");
    return r;
  };
  for (int i = 1; i <= 20; ++i)
    batch += with(record(id(i), ",\"ttft_ms\":" + std::to_string(i * 10) + (i <= 3 ? ",\"cache\":\"hit\",\"cache_tokens_saved\":100" : "")),
                  std::to_string(i), true);
  batch += with(record(id(21), ",\"tenant\":\"team-b\""), "null", false);
  ASSERT_TRUE(write(*l, batch));
  UsageQuery q;
  // Naming a key: the rows answer (the rollups are not per key), exactly.
  ASSERT_EQ(parseUsageQuery("from=2026-12-05&group_by=tenant&key=a-main", "2026-12-06T00:00:00.000Z", q), std::nullopt);
  EXPECT_FALSE(rollupsAnswer(q));
  UsageAnswer a;
  ASSERT_FALSE(runUsageQuery(c_, q, AnswerFormat::Csv, a));
  // percentile_cont: p50 of 1..20 is 10.5, p95 is 1 + 0.95 * 19 = 19.05.
  EXPECT_EQ(a.body,
            "tenant,requests,errors,input_tokens,output_tokens,cached_tokens,cost_usd,cache_hits,cache_tokens_saved,"
            "latency_p50_ms,latency_p95_ms,ttft_p50_ms,ttft_p95_ms\r\n"
            "team-a,20,0,240,60,0,0.00246,3,300,10.5,19.05,105,190.5\r\n"
            "team-b,1,0,12,3,0,0.000123,0,0,,,,\r\n");
}

// The rollups (ledger_rollups.h): the histogram's arithmetic and its stated bound, and
// a SQLite ledger's rollups equal to its rows whatever was replayed, superseded,
// migrated or pruned.
TEST(LedgerRollups, BucketsAndTheirValues) {
  EXPECT_EQ(latencyBucket(0), 0);
  EXPECT_EQ(latencyBucket(0.99), 0);
  EXPECT_EQ(latencyBucket(1), 1);
  EXPECT_EQ(latencyBucket(1.18), 1);   // below 2^(1/4) = 1.189
  EXPECT_EQ(latencyBucket(1.19), 2);
  EXPECT_EQ(latencyBucket(2), 5);      // [2, 2.378)
  EXPECT_EQ(latencyBucket(1000), 40);  // 4 * log2(1000) = 39.86
  EXPECT_EQ(latencyBucket(4'194'303), 88);
  EXPECT_EQ(latencyBucket(4'194'304), 89);  // 2^22 ms and above: the last bucket
  EXPECT_EQ(latencyBucket(1e12), 89);
  for (int b = 1; b < kHistogramBuckets - 1; ++b) EXPECT_EQ(latencyBucket(bucketValue(b)), b) << b;
  EXPECT_EQ(histogramColumn("duration", 7), "duration_b07");
  std::vector<std::int64_t> none(kHistogramBuckets, 0);
  EXPECT_EQ(histogramPercentile(none, 0.5), std::nullopt);
}

TEST(LedgerRollups, PercentilesWithinTheStatedBound) {
  // Latency-like sets (uniform, long-tailed, a few values, ties, some under 1 ms): the
  // histogram's p50 and p95 within a factor kPercentileErrorBound of percentile_cont's
  // when the values are 1 ms or more, and within 0.5 ms + (kPercentileErrorBound - 1) of
  // it always.
  std::uint64_t x = 88172645463325252ull;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<double>(x % 1'000'000) / 1'000'000.0;
  };
  double worst = 1;
  for (int set = 0; set < 400; ++set) {
    const int n = 1 + set % 50 * (set % 7 + 1);
    std::vector<double> values;
    for (int i = 0; i < n; ++i) {
      const double u = next();
      values.push_back(set % 4 == 0 ? 1 + u * 3000 : set % 4 == 1 ? std::exp(u * 14) : set % 4 == 2 ? std::floor(u * 4) * 250 + 1 : u * 3);
    }
    std::vector<std::int64_t> counts(kHistogramBuckets, 0);
    for (double v : values) ++counts[static_cast<std::size_t>(latencyBucket(v))];
    for (double p : {0.5, 0.95}) {
      std::vector<double> copy = values;
      const double exact = percentileCont(copy, p);
      const double estimate = *histogramPercentile(counts, p);
      EXPECT_LE(std::abs(estimate - exact), 0.5 + (kPercentileErrorBound - 1) * exact + 1e-9)
          << "set " << set << " p" << p << ": " << estimate << " vs " << exact;
      if (set % 4 == 3) continue;  // values under 1 ms: the absolute part of the bound
      const double ratio = estimate > exact ? estimate / exact : exact / estimate;
      worst = std::max(worst, ratio);
      EXPECT_LE(ratio, kPercentileErrorBound + 1e-12) << "set " << set << " p" << p << ": " << estimate << " vs " << exact;
    }
  }
  EXPECT_GT(worst, 1.01) << "the sets reach into the bound";
}

TEST_F(SqliteLedgerTest, RollupsEqualTheRowsAfterReplaysSupersedesMigrationAndRetention) {
  auto l = opened();
  const std::string later = ",\"supersedes\":\"";
  std::string batch;
  for (int i = 1; i <= 30; ++i)
    batch += record(id(i), ",\"stream\":true,\"ttft_ms\":" + std::to_string(i * 7) + (i % 4 == 0 ? ",\"status\":502" : "") +
                               (i % 5 == 0 ? ",\"model\":\"other\",\"route_name\":\"r1\"" : "") + (i % 6 == 0 ? ",\"tenant\":null" : ""),
                    i % 3 == 0 ? "0.5" : "0.000123", i <= 20 ? "2026-12-05T10:20:00.000Z" : "2026-12-05T11:40:00.000Z");
  ASSERT_TRUE(write(*l, batch));
  ASSERT_TRUE(write(*l, batch));  // replayed whole
  // Superseded: in order, out of order, and within one delivery.
  ASSERT_TRUE(write(*l, record(id(31), later + id(1) + "\",\"quality\":\"ok\"", "0.25")));
  ASSERT_TRUE(write(*l, record(id(33), later + id(32) + "\"")));
  ASSERT_TRUE(write(*l, record(id(32))));
  ASSERT_TRUE(write(*l, record(id(34)) + record(id(35), later + id(34) + "\"", "0.75")));
  ASSERT_TRUE(write(*l, record(id(31), later + id(1) + "\",\"quality\":\"ok\"", "0.25")));  // the successor replayed

  const std::string rows =
      "SELECT substr(ts, 1, 13) || ':00:00.000Z', coalesce(tenant, ''), coalesce(model, ''), coalesce(route_name, ''), count(*), "
      "sum(status >= 400), sum(prompt_tokens), sum(completion_tokens), sum(coalesce(cached_tokens, 0)), sum(cost_nano_usd) "
      "FROM tahua_usage_records GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4";
  const std::string rollups =
      "SELECT hour, tenant, model, route_name, requests, errors, prompt_tokens, completion_tokens, cached_tokens, cost_nano_usd "
      "FROM tahua_usage_hourly WHERE requests <> 0 ORDER BY 1, 2, 3, 4";
  auto table = [&](const std::string& sql) {
    std::string out;
    sqlite3* db = nullptr;
    sqlite3_open_v2(c_.path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    while (st && sqlite3_step(st) == SQLITE_ROW) {
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const unsigned char* t = sqlite3_column_text(st, i);
        out += std::string(t ? reinterpret_cast<const char*>(t) : "NULL") + "|";
      }
      out += "\n";
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
  };
  EXPECT_EQ(column("SELECT count(*) FROM tahua_usage_records"), std::vector<std::string>{"32"});
  EXPECT_EQ(table(rollups), table(rows));
  EXPECT_EQ(column("SELECT sum(requests) FROM tahua_usage_hourly"), std::vector<std::string>{"32"});
  // The histograms count each record once: durations (1.5 ms, all) and the streams' TTFTs.
  EXPECT_EQ(column("SELECT sum(duration_b03) FROM tahua_usage_hourly"), std::vector<std::string>{"32"});
  std::string ttfts = "0";
  for (int b = 0; b < kHistogramBuckets; ++b) ttfts += " + " + histogramColumn("ttft", b);
  EXPECT_EQ(column("SELECT sum(" + ttfts + ") FROM tahua_usage_hourly"), std::vector<std::string>{"29"})
      << "30 streams, one of them (1) superseded by a record that is not a stream";

  // The usage endpoint from the rollups equals it from the rows (a key named), sums and all.
  auto answer = [&](const std::string& query) {
    UsageQuery q;
    EXPECT_EQ(parseUsageQuery(query, "2026-12-06T00:00:00.000Z", q), std::nullopt);
    UsageAnswer a;
    auto failed = runUsageQuery(c_, q, AnswerFormat::Csv, a);
    EXPECT_FALSE(failed) << failed->message;
    return a.body;
  };
  auto sumsOnly = [](std::string csv) {  // the percentile columns differ by design: cut them
    std::string out;
    for (std::size_t at = 0; at < csv.size();) {
      std::size_t end = csv.find("\r\n", at);
      std::string line = csv.substr(at, end - at);
      for (int k = 0; k < 4; ++k) line.resize(line.rfind(','));
      out += line + "\n";
      at = end + 2;
    }
    return out;
  };
  const std::string from_rollups = answer("from=2026-12-05&to=2026-12-06&group_by=tenant,model,route,hour");
  const std::string from_rows = answer("from=2026-12-05&to=2026-12-06&group_by=tenant,model,route,hour&key=a-main");
  EXPECT_EQ(sumsOnly(from_rollups), sumsOnly(from_rows));
  // A `to` within an hour: the whole hours from the rollups, the rest from the rows.
  for (const char* range : {"from=2026-12-05T09:30:00Z&to=2026-12-05T11:50:00Z", "from=2026-12-05T10:10:00Z&to=2026-12-05T12:30:00Z"}) {
    UsageQuery q;
    ASSERT_EQ(parseUsageQuery(std::string(range) + "&group_by=tenant", "2026-12-06T00:00:00.000Z", q), std::nullopt);
    EXPECT_TRUE(rollupsAnswer(q)) << range;
    EXPECT_NE(usageRollupSql(Dialect::Sqlite, q).sql.find("UNION ALL"), std::string::npos) << range;
    EXPECT_EQ(sumsOnly(answer(std::string(range) + "&group_by=tenant")), sumsOnly(answer(std::string(range) + "&group_by=tenant&key=a-main")))
        << range;
  }

  // A version-1 ledger (the rollups not there yet) is migrated with its rows summed in.
  l.reset();
  execute("DROP TRIGGER tahua_usage_hourly_insert; DROP TRIGGER tahua_usage_hourly_delete; DROP TRIGGER tahua_usage_hourly_update; "
          "DROP TABLE tahua_usage_hourly; DELETE FROM tahua_ledger_schema WHERE version = 2");
  l = opened();
  EXPECT_EQ(l->foundVersion(), 1);
  EXPECT_EQ(table(rollups), table(rows));

  // Retention: the rows go, their share of the rollups with them, and the empty hours.
  std::string error;
  EXPECT_EQ(l->prune("2026-12-05T11:00:00.000Z", 1000, error), 22u) << error;
  EXPECT_EQ(table(rollups), table(rows));
  EXPECT_EQ(column("SELECT count(*) FROM tahua_usage_hourly WHERE hour < '2026-12-05T11'"), std::vector<std::string>{"0"});
}

}  // namespace ledger_test
}  // namespace tahua::ledger
