// The ledger's per-hour rollups (docs/ledger.md#per-hour-rollups): one row per hour,
// tenant, model and route with the sums GET /admin/v1/usage answers and a fixed
// log-bucketed histogram of duration_ms and of a stream's ttft_ms, kept beside the
// records by the database itself (triggers on the records table), so that every writer
// — this tahua, an older one still running during a rolling update, a hand-written
// INSERT or DELETE, retention — keeps them equal to the rows. Pure: the SQL that makes
// and maintains them, and the histogram's arithmetic; unit tested.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ledger/ledger_schema.h"

namespace tahua::ledger {

inline constexpr std::string_view kRollupTable = "tahua_usage_hourly";

// Histogram buckets: 0 holds [0, 1 ms); bucket b in 1..88 holds [2^((b-1)/4), 2^(b/4)) ms
// (four a doubling); 89 holds 2^22 ms (69.9 minutes) and above.
inline constexpr int kHistogramBuckets = 90;
inline constexpr int kBucketsPerDoubling = 4;
// A percentile read from the histogram is within this factor of the exact one when the
// values it lies between are from 1 ms to 2^22 ms (each value is taken as its bucket's
// geometric middle: at most 2^(1/8) away); a value under 1 ms is taken as 0.5 ms, so in
// general |estimate - exact| <= 0.5 ms + (2^(1/8) - 1) * exact; above 2^22 ms it says 2^22 ms.
inline constexpr double kPercentileErrorBound = 1.0905077326652577;  // 2^(1/8)

// The bucket of a latency in milliseconds (computed as 4 * ln(x) / ln(2), exactly as the
// SQL of bucketSql does, so that both agree on a value at a bucket's edge).
int latencyBucket(double ms);
// The value a bucket stands for: its geometric middle (0.5 for bucket 0, 2^22 for the last).
double bucketValue(int bucket);
// percentile_cont's p-th percentile (linear between the two closest ranks) of the values
// the merged counts describe, each value taken as its bucket's; nullopt without any.
std::optional<double> histogramPercentile(std::span<const std::int64_t> counts, double p);

// The SQL for a latency's bucket (null for null), the same arithmetic as latencyBucket.
std::string bucketSql(Dialect d, std::string_view x);
// The hour a record's ts falls in: PostgreSQL a timestamptz, SQLite "2026-12-05T10:00:00.000Z".
std::string hourSql(Dialect d, std::string_view ts);
// "duration_b07", "ttft_b89".
std::string histogramColumn(std::string_view metric, int bucket);

// The rollup table's sum columns after (hour, tenant, model, route_name), in order.
std::span<const std::string_view> rollupSumColumns(Dialect d);

// Schema version 2's statements: the rollup table, its index, the triggers that keep it,
// and the backfill from the rows already there (run under the migration lock).
std::vector<std::string> rollupMigration(Dialect d);

}  // namespace tahua::ledger
