#include "ledger/ledger_rollups.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace tahua::ledger {
namespace {

constexpr std::string_view kPostgresSums[] = {"requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens",
                                              "cost_usd", "cache_hits", "cache_tokens_saved"};
constexpr std::string_view kSqliteSums[] = {"requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens",
                                            "cost_nano_usd", "cache_hits", "cache_tokens_saved"};
constexpr std::string_view kMetrics[] = {"duration", "ttft"};

std::string table() { return std::string(kRollupTable); }
std::string records() { return std::string(kRecordsTable); }

std::string allColumns(Dialect d) {
  std::string out = "hour, tenant, model, route_name";
  for (auto c : rollupSumColumns(d)) out += ", " + std::string(c);
  for (auto m : kMetrics)
    for (int b = 0; b < kHistogramBuckets; ++b) out += ", " + histogramColumn(m, b);
  return out;
}

// One INSERT of the contributions of `source` (rows of the records table with a column
// `s`: +1 for a row that came, -1 for one that went), grouped per rollup row. PostgreSQL
// merges into existing rollup rows (ON CONFLICT, in key order: two writers lock rows in
// the same order, never a deadlock); SQLite's backfill runs on an empty table.
std::string aggregateInsert(Dialect d, const std::string& source) {
  const bool pg = d == Dialect::Postgres;
  const std::string cost = pg ? "cost_usd" : "cost_nano_usd";
  std::string sql = "INSERT INTO " + table() + (pg ? " AS h" : "") + " (" + allColumns(d) + ") SELECT hour, tenant, model, route_name, sum(s), " +
                    "coalesce(sum(s) FILTER (WHERE status >= 400), 0), coalesce(sum(s * prompt_tokens), 0), coalesce(sum(s * completion_tokens), 0), " +
                    "coalesce(sum(s * cached_tokens), 0), coalesce(sum(s * " + cost + "), 0), " +
                    "coalesce(sum(s) FILTER (WHERE cache IN ('hit', 'semantic-hit')), 0), coalesce(sum(s * cache_tokens_saved), 0)";
  // PostgreSQL keeps an empty bucket null (no bytes in the row); SQLite a 0 (no bytes either).
  for (auto m : kMetrics)
    for (int b = 0; b < kHistogramBuckets; ++b) {
      const std::string f = "sum(s) FILTER (WHERE " + std::string(m == "duration" ? "db" : "tb") + " = " + std::to_string(b) + ")";
      sql += ", " + (pg ? f : "coalesce(" + f + ", 0)");
    }
  sql += " FROM (SELECT s, " + hourSql(d, "ts") + " AS hour, coalesce(tenant, '') AS tenant, coalesce(model, '') AS model, " +
         "coalesce(route_name, '') AS route_name, status, prompt_tokens, completion_tokens, cached_tokens, " + cost +
         ", cache, cache_tokens_saved, " + bucketSql(d, "duration_ms") + " AS db, CASE WHEN " + (pg ? "stream" : "stream = 1") +
         " THEN " + bucketSql(d, "ttft_ms") + " END AS tb FROM (" + source + ") c) x GROUP BY 1, 2, 3, 4";
  if (!pg) return sql;
  sql += " ORDER BY 1, 2, 3, 4 ON CONFLICT (hour, tenant, model, route_name) DO UPDATE SET ";
  bool first = true;
  for (auto c : rollupSumColumns(d)) {
    sql += (first ? "" : ", ") + std::string(c) + " = h." + std::string(c) + " + excluded." + std::string(c);
    first = false;
  }
  for (auto m : kMetrics)
    for (int b = 0; b < kHistogramBuckets; ++b) {
      const std::string c = histogramColumn(m, b);
      sql += ", " + c + " = coalesce(h." + c + " + excluded." + c + ", h." + c + ", excluded." + c + ")";
    }
  return sql;
}

// SQLite's row trigger body: one row's contribution (`row` is NEW or OLD, `sign` 1 or -1).
std::string sqliteRowUpsert(std::string_view row, int sign) {
  const std::string r(row), s = std::to_string(sign);
  auto col = [&](std::string_view c) { return r + "." + std::string(c); };
  std::string sql = "INSERT INTO " + table() + " (" + allColumns(Dialect::Sqlite) + ") SELECT " + hourSql(Dialect::Sqlite, col("ts")) +
                    ", coalesce(" + col("tenant") + ", ''), coalesce(" + col("model") + ", ''), coalesce(" + col("route_name") + ", ''), " + s +
                    ", " + s + " * (coalesce(" + col("status") + ", 0) >= 400)";
  for (auto c : {"prompt_tokens", "completion_tokens", "cached_tokens", "cost_nano_usd"}) sql += ", " + s + " * coalesce(" + col(c) + ", 0)";
  sql += ", " + s + " * (coalesce(" + col("cache") + ", '') IN ('hit', 'semantic-hit')), " + s + " * coalesce(" + col("cache_tokens_saved") + ", 0)";
  for (auto m : kMetrics)
    for (int b = 0; b < kHistogramBuckets; ++b)
      sql += ", " + s + " * (" + (m == "duration" ? "db" : "tb") + " IS " + std::to_string(b) + ")";
  sql += " FROM (SELECT " + bucketSql(Dialect::Sqlite, col("duration_ms")) + " AS db, CASE WHEN " + col("stream") + " = 1 THEN " +
         bucketSql(Dialect::Sqlite, col("ttft_ms")) + " END AS tb) WHERE true ON CONFLICT (hour, tenant, model, route_name) DO UPDATE SET ";
  bool first = true;
  for (auto c : rollupSumColumns(Dialect::Sqlite)) {
    sql += (first ? "" : ", ") + std::string(c) + " = " + std::string(c) + " + excluded." + std::string(c);
    first = false;
  }
  for (auto m : kMetrics)
    for (int b = 0; b < kHistogramBuckets; ++b) {
      const std::string c = histogramColumn(m, b);
      sql += ", " + c + " = " + c + " + excluded." + c;
    }
  return sql + ";";
}

std::string createTable(Dialect d) {
  const bool pg = d == Dialect::Postgres;
  std::string sql = "CREATE TABLE " + table() + " (hour " + (pg ? "timestamptz" : "TEXT") + " NOT NULL, tenant " + (pg ? "text" : "TEXT") +
                    " NOT NULL, model " + (pg ? "text" : "TEXT") + " NOT NULL, route_name " + (pg ? "text" : "TEXT") + " NOT NULL";
  for (auto c : rollupSumColumns(d)) sql += ", " + std::string(c) + (c == "cost_usd" ? " numeric" : pg ? " bigint" : " INTEGER") + " NOT NULL";
  for (auto m : kMetrics)
    for (int b = 0; b < kHistogramBuckets; ++b) sql += ", " + histogramColumn(m, b) + (pg ? " integer" : " INTEGER NOT NULL DEFAULT 0");
  sql += ", PRIMARY KEY (hour, tenant, model, route_name))";
  if (!pg) sql += " WITHOUT ROWID";  // clustered by hour: a range of hours is one range of the file
  return sql;
}

}  // namespace

int latencyBucket(double ms) {
  if (!(ms >= 1)) return 0;
  const double b = 1 + std::floor(kBucketsPerDoubling * std::log(ms) / std::log(2.0));
  return b >= kHistogramBuckets - 1 ? kHistogramBuckets - 1 : static_cast<int>(b);
}

double bucketValue(int bucket) {
  if (bucket <= 0) return 0.5;
  if (bucket >= kHistogramBuckets - 1) return std::exp2(static_cast<double>(kHistogramBuckets - 2) / kBucketsPerDoubling);
  return std::exp2((bucket - 0.5) / kBucketsPerDoubling);
}

std::optional<double> histogramPercentile(std::span<const std::int64_t> counts, double p) {
  std::int64_t n = 0;
  for (auto c : counts) n += c > 0 ? c : 0;
  if (n == 0) return std::nullopt;
  const double pos = p * static_cast<double>(n - 1);
  const auto lo = static_cast<std::int64_t>(std::floor(pos));
  const std::int64_t hi = std::min(lo + 1, n - 1);
  // The value of the rank-th smallest (0-based).
  auto valueAt = [&](std::int64_t rank) {
    std::int64_t seen = 0;
    for (std::size_t b = 0; b < counts.size(); ++b) {
      seen += counts[b] > 0 ? counts[b] : 0;
      if (rank < seen) return bucketValue(static_cast<int>(b));
    }
    return bucketValue(static_cast<int>(counts.size()) - 1);
  };
  const double a = valueAt(lo), b = valueAt(hi);
  return a + (b - a) * (pos - static_cast<double>(lo));
}

std::string bucketSql(Dialect d, std::string_view x) {
  const std::string v(x);
  if (d == Dialect::Postgres)
    return "CASE WHEN " + v + " IS NULL THEN NULL WHEN " + v + " < 1 THEN 0 ELSE least(89, 1 + floor(4 * ln(" + v +
           "::float8) / ln(2::float8))::integer) END";
  return "CASE WHEN " + v + " IS NULL THEN NULL WHEN " + v + " < 1 THEN 0 ELSE min(89, 1 + CAST(floor(4 * ln(" + v +
         ") / ln(2)) AS INTEGER)) END";
}

std::string hourSql(Dialect d, std::string_view ts) {
  const std::string t(ts);
  if (d == Dialect::Postgres) return "date_trunc('hour', " + t + " AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'";
  return "substr(" + t + ", 1, 13) || ':00:00.000Z'";
}

std::string histogramColumn(std::string_view metric, int bucket) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%02d", bucket);
  return std::string(metric) + "_b" + buf;
}

std::span<const std::string_view> rollupSumColumns(Dialect d) {
  return d == Dialect::Postgres ? std::span<const std::string_view>(kPostgresSums) : std::span<const std::string_view>(kSqliteSums);
}

std::vector<std::string> rollupMigration(Dialect d) {
  std::vector<std::string> steps;
  steps.push_back(createTable(d));
  steps.push_back("CREATE INDEX " + table() + "_tenant ON " + table() + " (tenant, hour)");
  if (d == Dialect::Postgres) {
    // Statement triggers with transition tables: one aggregated upsert per statement (a
    // batch of 500 records is one), only the rows the statement really inserted or
    // deleted (a replayed record inserts nothing, so counts nothing).
    const struct {
      const char* what;
      const char* referencing;
      const char* source;
    } kinds[] = {
        {"insert", "REFERENCING NEW TABLE AS tahua_new", "SELECT 1 AS s, * FROM tahua_new"},
        {"delete", "REFERENCING OLD TABLE AS tahua_old", "SELECT -1 AS s, * FROM tahua_old"},
        {"update", "REFERENCING OLD TABLE AS tahua_old NEW TABLE AS tahua_new",
         "SELECT -1 AS s, * FROM tahua_old UNION ALL SELECT 1 AS s, * FROM tahua_new"},
    };
    for (const auto& k : kinds) {
      const std::string fn = table() + "_" + k.what;
      steps.push_back("CREATE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $tahua$ BEGIN " + aggregateInsert(d, k.source) +
                      "; RETURN NULL; END $tahua$");
      std::string upper = k.what;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      steps.push_back("CREATE TRIGGER " + fn + " AFTER " + upper + " ON " + records() + " " + k.referencing +
                      " FOR EACH STATEMENT EXECUTE FUNCTION " + fn + "()");
    }
    steps.push_back("CREATE FUNCTION " + table() + "_truncate() RETURNS trigger LANGUAGE plpgsql AS $tahua$ BEGIN TRUNCATE " + table() +
                    "; RETURN NULL; END $tahua$");
    steps.push_back("CREATE TRIGGER " + table() + "_truncate AFTER TRUNCATE ON " + records() + " FOR EACH STATEMENT EXECUTE FUNCTION " +
                    table() + "_truncate()");
  } else {
    // SQLite's triggers are per row: one upsert per record written (measured in
    // docs/benchmarks.md#ledger-queries). ln() needs SQLite's math functions (3.35+,
    // built in by default): the first step fails clearly without them.
    steps.insert(steps.begin(), "SELECT ln(2)");
    steps.push_back("CREATE TRIGGER " + table() + "_insert AFTER INSERT ON " + records() + " BEGIN " + sqliteRowUpsert("NEW", 1) + " END");
    steps.push_back("CREATE TRIGGER " + table() + "_delete AFTER DELETE ON " + records() + " BEGIN " + sqliteRowUpsert("OLD", -1) + " END");
    steps.push_back("CREATE TRIGGER " + table() + "_update AFTER UPDATE ON " + records() + " BEGIN " + sqliteRowUpsert("OLD", -1) + " " +
                    sqliteRowUpsert("NEW", 1) + " END");
  }
  // The rows a version-1 ledger already holds.
  steps.push_back(aggregateInsert(d, "SELECT 1 AS s, * FROM " + records()));
  return steps;
}

}  // namespace tahua::ledger
