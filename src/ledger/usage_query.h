// GET /admin/v1/usage's question and its answer from the ledger: requests, errors,
// tokens, cost, cache savings and latency percentiles per group (tenant, key, model,
// route, day or hour) over a time range, from the first sqlite or postgres usage sink.
// Parsing and the SQL are pure (unit tested); runUsageQuery() reads the ledger
// (ledger_read.h) and blocks: the admin API calls it on a thread of its own.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/telemetry_config.h"
#include "ledger/ledger_read.h"
#include "ledger/ledger_schema.h"
#include "ledger/text_format.h"

namespace tahua::ledger {

struct UsageQuery {
  std::string from, to;  // ISO 8601 UTC, milliseconds: from <= ts < to
  // With tz: a `from` or `to` given as a date is that day's midnight in tz (PostgreSQL
  // resolves it); from/to then hold the UTC midnight, for the range check only.
  bool from_local = false, to_local = false;
  std::string tz;  // an IANA zone name (Europe/Berlin) days and hours are counted in; empty: UTC
  std::vector<std::string> group_by;  // of: tenant, key, model, route, day, hour (in the order given)
  std::optional<std::string> tenant, key, model;
};

inline constexpr std::size_t kMaxUsageGroups = 10'000;

// Reads the query string (percent-decoded). nullopt, or the error naming the parameter:
// "from: ...". `now` fills a missing `to`. Unknown parameters are errors; a range longer
// than `max_range` (0: any) is one naming `to`.
std::optional<std::string> parseUsageQuery(std::string_view query, std::string_view now, UsageQuery& out,
                                           std::chrono::milliseconds max_range = {});

// tz on a database that cannot count days in it (SQLite: no zone database): the 400's
// message, naming tz.
std::optional<std::string> zoneRefusal(Dialect d, const UsageQuery& q);

// A date (2026-12-05) or date-time (2026-12-05T10:00:00Z, seconds and milliseconds
// optional, Z or +00:00) as "2026-12-05T10:00:00.000Z"; nullopt when it is neither.
std::optional<std::string> normalizeUtc(std::string_view text);

// The range check both ledger endpoints make: nullopt, or the error naming `to`.
std::optional<std::string> checkRange(std::string_view from, std::string_view to, std::chrono::milliseconds max_range);

// The statement and its parameters ($1.. / ?1..), in order: from, to, the filters given, tz.
using UsageSql = ReadStatement;
UsageSql usageSql(Dialect d, const UsageQuery& q);

// Whether the per-hour rollups (ledger_rollups.h) can answer `q`: it names no key (the
// rollups are per tenant, model and route, not per key) and spans at least one whole UTC
// hour. In a time zone (PostgreSQL) the zone must also be a whole number of hours from
// UTC over the range: zoneCheckSql asks the database ("true" or "false").
bool rollupsAnswer(const UsageQuery& q);
ReadStatement zoneCheckSql(const UsageQuery& q);
// The statement over the rollups: the whole hours of the range from the rollup table, the
// part hours at either end (a `to` of now) from the rows, one GROUP BY over both. Its
// cells after the groups: the eight sums, then kHistogramBuckets counts of duration_ms,
// then as many of ttft_ms (streams only).
UsageSql usageRollupSql(Dialect d, const UsageQuery& q);

// Integer nano-dollars as a decimal ("0.000123456", "12", "0").
std::string nanosToDecimal(long long nanos);

// The answer. JSON: {"from","to","tz"?,"group_by":[...],"percentiles":"exact"|"histogram","groups":[{<groups>...,"requests","errors",
// "input_tokens","output_tokens","cached_tokens","cost_usd","cache_hits","cache_tokens_saved",
// "latency_p50_ms","latency_p95_ms","ttft_p50_ms","ttft_p95_ms"}],"truncated":bool}; CSV:
// the groups, one line each, under a header line.
struct UsageAnswer {
  std::string body;
  bool truncated = false;
};
std::optional<ReadFailure> runUsageQuery(const UsageSinkConfig& sink, const UsageQuery& q, AnswerFormat format, UsageAnswer& answer);

// The first sqlite or postgres sink of `usage`, if enabled; nullptr otherwise.
const UsageSinkConfig* ledgerSink(const UsageConfig& usage);

}  // namespace tahua::ledger
