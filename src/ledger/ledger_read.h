// Reading the spend ledger for the admin API's questions (usage_query.h,
// request_log.h): one statement on a read-only connection of its own (never the usage
// exporter's), bounded in time (kReadDeadline: PostgreSQL's statement_timeout, SQLite's
// progress handler) and in rows. Blocks: the admin API calls it on a thread of its own,
// never on a worker. Errors never hold a password.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "config/telemetry_config.h"

namespace tahua::ledger {

inline constexpr std::chrono::seconds kReadDeadline{10};
// SQLite computes exact percentiles in C++ (tahua_percentiles(x): "p50 p95" of a
// group's values): the values held for one statement at most, all groups together.
inline constexpr std::size_t kMaxPercentileValues = 4'000'000;

// A statement and its parameters ($1.. in PostgreSQL, ?1.. in SQLite).
struct ReadStatement {
  std::string sql;
  std::vector<std::string> params;
};

// Rows as text cells in the select's order; a null cell as nullopt.
using Cell = std::optional<std::string>;
using Row = std::vector<Cell>;

struct ReadFailure {
  enum class Kind {
    Unavailable,  // cannot connect, or the database refused the statement
    Deadline,     // past kReadDeadline
    UnknownZone,  // PostgreSQL does not know the time zone the statement names
    TooManyValues,  // SQLite: over kMaxPercentileValues for the percentiles
  };
  Kind kind = Kind::Unavailable;
  std::string message;
};

// Runs `s`, keeping at most `max_rows` rows (the statement's LIMIT says how many it
// asks for; this is the bound whatever it says).
std::optional<ReadFailure> readLedger(const UsageSinkConfig& sink, const ReadStatement& s, std::size_t max_rows, std::vector<Row>& rows);

// Exact percentile_cont over `values` (sorted in place): linear interpolation between
// the closest ranks, as PostgreSQL's percentile_cont. `values` not empty; 0 <= p <= 1.
double percentileCont(std::vector<double>& values, double p);

}  // namespace tahua::ledger
