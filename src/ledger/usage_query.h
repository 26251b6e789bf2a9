// GET /admin/v1/usage's question and its answer from the ledger: requests, errors,
// tokens and cost per group (tenant, key, model, route, day or hour) over a time range,
// from the first sqlite or postgres usage sink. Parsing and the SQL are pure (unit
// tested); run() opens its own connection and blocks: the admin API calls it on a
// thread of its own, never on a worker.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/telemetry_config.h"
#include "ledger/ledger_schema.h"

namespace tahua::ledger {

struct UsageQuery {
  std::string from, to;  // ISO 8601 UTC, milliseconds: from <= ts < to
  std::vector<std::string> group_by;  // of: tenant, key, model, route, day, hour (in the order given)
  std::optional<std::string> tenant, key, model;
};

inline constexpr std::size_t kMaxUsageGroups = 10'000;

// Reads the query string (percent-decoded). nullopt, or the error naming the parameter:
// "from: ...". `now` fills a missing `to`. Unknown parameters are errors.
std::optional<std::string> parseUsageQuery(std::string_view query, std::string_view now, UsageQuery& out);

// A date (2026-12-05) or date-time (2026-12-05T10:00:00Z, seconds and milliseconds
// optional, Z or +00:00) as "2026-12-05T10:00:00.000Z"; nullopt when it is neither.
std::optional<std::string> normalizeUtc(std::string_view text);

// The statement and its parameters ($1.. / ?1..), in order: from, to, then the filters given.
struct UsageSql {
  std::string sql;
  std::vector<std::string> params;
};
UsageSql usageSql(Dialect d, const UsageQuery& q);

// Integer nano-dollars as a decimal ("0.000123456", "12", "0").
std::string nanosToDecimal(long long nanos);

// The answer as JSON: {"from","to","group_by":[...],"groups":[{...,"requests","errors",
// "input_tokens","output_tokens","cached_tokens","cost_usd"}],"truncated":bool}. False:
// `error` (the database unreachable or refusing; never a password).
bool runUsageQuery(const UsageSinkConfig& sink, const UsageQuery& q, std::string& json, std::string& error);

// The first sqlite or postgres sink of `usage`, if enabled; nullptr otherwise.
const UsageSinkConfig* ledgerSink(const UsageConfig& usage);

}  // namespace tahua::ledger
