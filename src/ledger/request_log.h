// GET /admin/v1/requests: the request log, one row per ledger record (ids, trace,
// tenant, key, models, status, end reason, tokens, cost, latency, TTFT, cache,
// guardrail verdicts; never a prompt's or an answer's text), newest first, paged by an
// opaque keyset cursor (ts, record_id); and GET /admin/v1/requests/{record_id}, one
// record. Parsing and the SQL are pure (unit tested); the run functions read the ledger
// (ledger_read.h) and block: the admin API calls them on a thread of its own.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "config/telemetry_config.h"
#include "ledger/ledger_read.h"
#include "ledger/ledger_schema.h"
#include "ledger/text_format.h"

namespace tahua::ledger {

inline constexpr std::size_t kDefaultRequestLimit = 50;
inline constexpr std::size_t kMaxRequestLimit = 1000;

struct RequestLogQuery {
  std::string from, to;  // ISO 8601 UTC, milliseconds: from <= ts < to
  std::optional<std::string> tenant, key, model, end_reason;
  int status_min = 0, status_max = 0;  // status=404: 404..404; status=5xx: 500..599; 0: any
  std::size_t limit = kDefaultRequestLimit;
  // The cursor: rows strictly older than (ts, record_id) in the log's order.
  std::optional<std::string> after_ts, after_id;
};

// Reads the query string. nullopt, or the error naming the parameter. `to` defaults to
// `now`, `from` to `to` minus max_range (0: the epoch); a longer range is an error naming `to`.
std::optional<std::string> parseRequestLogQuery(std::string_view query, std::string_view now, RequestLogQuery& out,
                                                std::chrono::milliseconds max_range);

// The opaque cursor of the row (ts, record_id) the next page starts after, and back
// (nullopt: not a cursor this endpoint made).
std::string encodeCursor(std::string_view ts, std::string_view record_id);
std::optional<std::pair<std::string, std::string>> decodeCursor(std::string_view cursor);

// A record id as the ledger holds them (a UUID, 8-4-4-4-12 hex digits).
bool validRecordId(std::string_view id);

// The statements: the page (LIMIT limit + 1: one more tells there is a next page), and
// one record (by id, within `tenant` when given).
ReadStatement requestLogSql(Dialect d, const RequestLogQuery& q);
ReadStatement requestSql(Dialect d, std::string_view record_id, const std::optional<std::string>& tenant);

// JSON: {"requests":[{...}],"next_cursor":"..."|null}; CSV: the rows under a header line
// (the next cursor is the reply's X-Next-Cursor header then).
struct RequestLogAnswer {
  std::string body;
  std::string next_cursor;  // empty: the last page
  bool found = true;        // one record: false when there is none (or not the caller's tenant's)
};
std::optional<ReadFailure> runRequestLog(const UsageSinkConfig& sink, const RequestLogQuery& q, AnswerFormat format,
                                         RequestLogAnswer& answer);
// One record: its object (JSON) or a header line and its line (CSV).
std::optional<ReadFailure> runRequestDetail(const UsageSinkConfig& sink, std::string_view record_id,
                                            const std::optional<std::string>& tenant, AnswerFormat format, RequestLogAnswer& answer);

}  // namespace tahua::ledger
