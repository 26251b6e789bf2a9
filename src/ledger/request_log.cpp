#include "ledger/request_log.h"

#include <cctype>
#include <cstdlib>

#include "ledger/usage_query.h"

namespace tahua::ledger {
namespace {

// The log's columns: the answer's name, the SQL per database, and how a cell is written.
enum class Shape { Text, Integer, Millis, Boolean, Cost, Time };
struct LogColumn {
  const char* name;
  const char* column;  // the table's column; ts/end_ts/cost/record_id are spelled per database below
  Shape shape;
};
constexpr LogColumn kColumns[] = {
    {"record_id", "record_id", Shape::Text},
    {"request_id", "request_id", Shape::Text},
    {"trace_id", "trace_id", Shape::Text},
    {"ts", "ts", Shape::Time},
    {"end_ts", "end_ts", Shape::Time},
    {"gateway", "gateway", Shape::Text},
    {"tenant", "tenant", Shape::Text},
    {"key", "key", Shape::Text},
    {"api", "api", Shape::Text},
    {"method", "method", Shape::Text},
    {"path", "path", Shape::Text},
    {"requested_model", "requested_model", Shape::Text},
    {"model", "model", Shape::Text},
    {"provider", "provider", Shape::Text},
    {"deployment", "deployment", Shape::Text},
    {"route", "route_name", Shape::Text},
    {"stream", "stream", Shape::Boolean},
    {"status", "status", Shape::Integer},
    {"end_reason", "end_reason", Shape::Text},
    {"error", "error", Shape::Text},
    {"attempts", "attempts", Shape::Integer},
    {"fallback", "fallback", Shape::Text},
    {"input_tokens", "prompt_tokens", Shape::Integer},
    {"output_tokens", "completion_tokens", Shape::Integer},
    {"cached_tokens", "cached_tokens", Shape::Integer},
    {"total_tokens", "total_tokens", Shape::Integer},
    {"cost_usd", "cost", Shape::Cost},
    {"latency_ms", "duration_ms", Shape::Millis},
    {"ttft_ms", "ttft_ms", Shape::Millis},
    {"cache", "cache", Shape::Text},
    {"cache_tokens_saved", "cache_tokens_saved", Shape::Integer},
    {"prompt_template", "prompt", Shape::Text},
    {"guardrails", "guardrails", Shape::Text},
    {"guardrails_unchecked", "guardrails_unchecked", Shape::Text},
    {"quality", "quality", Shape::Text},
    {"mcp_method", "mcp_method", Shape::Text},
    {"mcp_tool", "mcp_tool", Shape::Text},
    {"mcp_outcome", "mcp_outcome", Shape::Text},
};

std::string selectList(Dialect d) {
  const bool pg = d == Dialect::Postgres;
  std::string out;
  for (const auto& c : kColumns) {
    if (!out.empty()) out += ", ";
    const std::string_view col = c.column;
    if (c.shape == Shape::Time && pg) out += "to_char(" + std::string(col) + " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";
    else if (c.shape == Shape::Cost) out += pg ? "cost_usd::text" : "cost_nano_usd";
    else if (col == "record_id" && pg) out += "record_id::text";
    else out += col;
  }
  return out;
}

Table logTable(Dialect d, std::vector<Row>& rows) {
  Table t;
  for (const auto& c : kColumns)
    t.columns.push_back({c.name, c.shape == Shape::Text || c.shape == Shape::Time ? Table::Kind::Text : Table::Kind::Literal});
  for (Row& row : rows) {
    for (std::size_t i = 0; i < std::size(kColumns) && i < row.size(); ++i) {
      Cell& cell = row[i];
      if (!cell) continue;
      switch (kColumns[i].shape) {
        case Shape::Boolean: cell = (*cell == "t" || *cell == "1" || *cell == "true") ? "true" : "false"; break;
        case Shape::Integer: cell = std::to_string(std::strtoll(cell->c_str(), nullptr, 10)); break;
        case Shape::Millis: cell = formatMillis(std::strtod(cell->c_str(), nullptr)); break;
        case Shape::Cost:
          if (d == Dialect::Sqlite) cell = nanosToDecimal(std::strtoll(cell->c_str(), nullptr, 10));
          break;
        default: break;
      }
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

}  // namespace

bool validRecordId(std::string_view id) {
  if (id.size() != 36) return false;
  for (std::size_t i = 0; i < id.size(); ++i) {
    const char c = id[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
      return false;
    }
  }
  return true;
}

std::string encodeCursor(std::string_view ts, std::string_view record_id) {
  return base64Url(std::string(ts) + "|" + std::string(record_id));
}

std::optional<std::pair<std::string, std::string>> decodeCursor(std::string_view cursor) {
  if (cursor.size() > 128) return std::nullopt;
  auto text = unbase64Url(cursor);
  if (!text) return std::nullopt;
  const auto bar = text->find('|');
  if (bar == std::string::npos) return std::nullopt;
  std::string ts = text->substr(0, bar), id = text->substr(bar + 1);
  if (!isoToMillis(ts) || !validRecordId(id)) return std::nullopt;
  return std::pair{std::move(ts), std::move(id)};
}

std::optional<std::string> parseRequestLogQuery(std::string_view query, std::string_view now, RequestLogQuery& out,
                                                std::chrono::milliseconds max_range) {
  for (const auto& [name, value] : queryParams(query)) {
    if (value.size() > 256) return name + ": longer than 256 characters";
    if (name == "from" || name == "to") {
      auto t = normalizeUtc(value);
      if (!t) return name + ": expected a UTC date (2026-12-05) or date-time (2026-12-05T10:00:00Z), got \"" + value + "\"";
      (name == "from" ? out.from : out.to) = *t;
    } else if (name == "tenant" || name == "key" || name == "model" || name == "end_reason") {
      if (value.empty()) return name + ": empty";
      (name == "tenant" ? out.tenant : name == "key" ? out.key : name == "model" ? out.model : out.end_reason) = value;
    } else if (name == "status") {
      const bool klass = value.size() == 3 && value[0] >= '1' && value[0] <= '5' && (value.substr(1) == "xx" || value.substr(1) == "XX");
      bool number = value.size() == 3;
      for (char c : value) number = number && c >= '0' && c <= '9';
      if (klass) {
        out.status_min = (value[0] - '0') * 100;
        out.status_max = out.status_min + 99;
      } else if (number && std::stoi(value) >= 100 && std::stoi(value) <= 599) {
        out.status_min = out.status_max = std::stoi(value);
      } else {
        return "status: expected an HTTP status (404) or a class (4xx), got \"" + value + "\"";
      }
    } else if (name == "limit") {
      bool number = !value.empty() && value.size() <= 5;
      for (char c : value) number = number && c >= '0' && c <= '9';
      const long n = number ? std::stol(value) : 0;
      if (n < 1 || n > static_cast<long>(kMaxRequestLimit))
        return "limit: expected 1 to " + std::to_string(kMaxRequestLimit) + ", got \"" + value + "\"";
      out.limit = static_cast<std::size_t>(n);
    } else if (name == "cursor") {
      auto c = decodeCursor(value);
      if (!c) return std::string("cursor: not a cursor this endpoint gave (pass next_cursor as it came)");
      out.after_ts = std::move(c->first);
      out.after_id = std::move(c->second);
    } else {
      return name + ": unknown parameter (from, to, tenant, key, model, status, end_reason, limit, cursor)";
    }
  }
  if (out.to.empty()) out.to = std::string(now);
  if (out.from.empty()) {
    const auto to = isoToMillis(out.to);
    out.from = max_range.count() > 0 && to ? millisToIso(*to - max_range.count()) : "1970-01-01T00:00:00.000Z";
  }
  return checkRange(out.from, out.to, max_range);
}

ReadStatement requestLogSql(Dialect d, const RequestLogQuery& q) {
  ReadStatement s;
  const bool pg = d == Dialect::Postgres;
  auto param = [&](std::string v, const char* cast = "") {
    s.params.push_back(std::move(v));
    return (pg ? "$" : "?") + std::to_string(s.params.size()) + (pg ? cast : "");
  };
  s.sql = "SELECT " + selectList(d) + " FROM " + std::string(kRecordsTable);
  s.sql += " WHERE ts >= " + param(q.from, "::timestamptz");
  s.sql += " AND ts < " + param(q.to, "::timestamptz");
  if (q.tenant) s.sql += " AND tenant = " + param(*q.tenant);
  if (q.key) s.sql += " AND key = " + param(*q.key);
  if (q.model) s.sql += " AND model = " + param(*q.model);
  if (q.end_reason) s.sql += " AND end_reason = " + param(*q.end_reason);
  if (q.status_min) {
    s.sql += " AND status >= " + std::to_string(q.status_min) + " AND status <= " + std::to_string(q.status_max);
  }
  if (q.after_ts && q.after_id) {
    // (ts, record_id) < the cursor's, written so the ts index bounds the scan.
    const std::string ts = param(*q.after_ts, "::timestamptz");
    const std::string id = param(*q.after_id, "::uuid");
    s.sql += " AND ts <= " + ts + " AND (ts < " + ts + " OR record_id < " + id + ")";
  }
  s.sql += " ORDER BY ts DESC, record_id DESC LIMIT " + std::to_string(q.limit + 1);
  return s;
}

ReadStatement requestSql(Dialect d, std::string_view record_id, const std::optional<std::string>& tenant) {
  ReadStatement s;
  const bool pg = d == Dialect::Postgres;
  s.params.emplace_back(record_id);
  s.sql = "SELECT " + selectList(d) + " FROM " + std::string(kRecordsTable) + " WHERE record_id = " + (pg ? "$1::uuid" : "?1");
  if (tenant) {
    s.params.push_back(*tenant);
    s.sql += std::string(" AND tenant = ") + (pg ? "$2" : "?2");
  }
  return s;
}

std::optional<ReadFailure> runRequestLog(const UsageSinkConfig& sink, const RequestLogQuery& q, AnswerFormat format,
                                         RequestLogAnswer& answer) {
  const Dialect d = sink.type == UsageSinkConfig::Type::Postgres ? Dialect::Postgres : Dialect::Sqlite;
  std::vector<Row> rows;
  if (auto failed = readLedger(sink, requestLogSql(d, q), q.limit + 1, rows)) return failed;
  for (const Row& r : rows)
    if (r.size() != std::size(kColumns)) return ReadFailure{ReadFailure::Kind::Unavailable, "unexpected answer from the database"};
  if (rows.size() > q.limit) {
    rows.resize(q.limit);
    const Row& last = rows.back();  // columns 0 and 3: record_id, ts
    answer.next_cursor = encodeCursor(last[3].value_or(""), last[0].value_or(""));
  }
  const Table t = logTable(d, rows);
  if (format == AnswerFormat::Csv) {
    answer.body = tableCsv(t);
    return std::nullopt;
  }
  answer.body = "{\"requests\":";
  appendJsonRows(answer.body, t);
  answer.body += ",\"next_cursor\":";
  if (answer.next_cursor.empty()) answer.body += "null";
  else jsonString(answer.body, answer.next_cursor);
  answer.body += "}";
  return std::nullopt;
}

std::optional<ReadFailure> runRequestDetail(const UsageSinkConfig& sink, std::string_view record_id,
                                            const std::optional<std::string>& tenant, AnswerFormat format, RequestLogAnswer& answer) {
  const Dialect d = sink.type == UsageSinkConfig::Type::Postgres ? Dialect::Postgres : Dialect::Sqlite;
  std::vector<Row> rows;
  // SQLite keeps record ids as the record wrote them (lower case); PostgreSQL's uuid compares any case.
  std::string id(record_id);
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (auto failed = readLedger(sink, requestSql(d, id, tenant), 1, rows)) return failed;
  answer.found = !rows.empty() && rows[0].size() == std::size(kColumns);
  if (!answer.found) return std::nullopt;
  const Table t = logTable(d, rows);
  if (format == AnswerFormat::Csv) answer.body = tableCsv(t);
  else appendJsonRow(answer.body, t, 0);
  return std::nullopt;
}

}  // namespace tahua::ledger
