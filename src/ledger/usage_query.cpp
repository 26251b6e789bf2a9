#include "ledger/usage_query.h"

#include <postgresql/libpq-fe.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

namespace tahua::ledger {
namespace {

std::string percentDecode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i] == '+' ? ' ' : s[i]);
    }
  }
  return out;
}

bool digits(std::string_view s, std::size_t at, std::size_t n) {
  if (at + n > s.size()) return false;
  for (std::size_t i = at; i < at + n; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

void jsonString(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// The SQL expression of a group, per database (`route` is the record's route_name).
std::string groupExpr(Dialect d, std::string_view g) {
  if (g == "route") return "route_name";
  if (g == "day") return d == Dialect::Postgres ? "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD')" : "substr(ts, 1, 10)";
  if (g == "hour")
    return d == Dialect::Postgres ? "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24\":00Z\"')" : "substr(ts, 1, 13) || ':00Z'";
  return std::string(g);  // tenant, key, model: columns of those names
}

}  // namespace

std::optional<std::string> normalizeUtc(std::string_view t) {
  // YYYY-MM-DD[THH:MM[:SS[.mmm]](Z|+00:00)]
  if (!digits(t, 0, 4) || t.size() < 10 || t[4] != '-' || !digits(t, 5, 2) || t[7] != '-' || !digits(t, 8, 2)) return std::nullopt;
  const int month = (t[5] - '0') * 10 + (t[6] - '0'), day = (t[8] - '0') * 10 + (t[9] - '0');
  if (month < 1 || month > 12 || day < 1 || day > 31) return std::nullopt;
  std::string out(t.substr(0, 10));
  std::string hh = "00", mm = "00", ss = "00", ms = "000";
  if (t.size() > 10) {
    if ((t[10] != 'T' && t[10] != ' ') || !digits(t, 11, 2) || t.size() < 16 || t[13] != ':' || !digits(t, 14, 2)) return std::nullopt;
    hh = t.substr(11, 2);
    mm = t.substr(14, 2);
    std::size_t at = 16;
    if (at < t.size() && t[at] == ':') {
      if (!digits(t, at + 1, 2)) return std::nullopt;
      ss = t.substr(at + 1, 2);
      at += 3;
      if (at < t.size() && t[at] == '.') {
        if (!digits(t, at + 1, 3)) return std::nullopt;
        ms = t.substr(at + 1, 3);
        at += 4;
      }
    }
    const std::string_view zone = t.substr(at);
    if (zone != "Z" && zone != "+00:00") return std::nullopt;
    if (std::stoi(hh) > 23 || std::stoi(mm) > 59 || std::stoi(ss) > 59) return std::nullopt;
  }
  return out + "T" + hh + ":" + mm + ":" + ss + "." + ms + "Z";
}

std::optional<std::string> parseUsageQuery(std::string_view query, std::string_view now, UsageQuery& out) {
  bool have_from = false;
  std::optional<std::string> seen_error;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    const std::string name = percentDecode(pair.substr(0, eq));
    const std::string value = eq == std::string_view::npos ? std::string() : percentDecode(pair.substr(eq + 1));
    if (value.size() > 256) return name + ": longer than 256 characters";
    if (name == "from" || name == "to") {
      auto t = normalizeUtc(value);
      if (!t) return name + ": expected a UTC date (2026-12-05) or date-time (2026-12-05T10:00:00Z), got \"" + value + "\"";
      (name == "from" ? out.from : out.to) = *t;
      if (name == "from") have_from = true;
    } else if (name == "group_by") {
      out.group_by.clear();
      std::string_view rest = value;
      while (!rest.empty()) {
        const auto comma = rest.find(',');
        const std::string g(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
        if (g != "tenant" && g != "key" && g != "model" && g != "route" && g != "day" && g != "hour")
          return "group_by: unknown group \"" + g + "\" (tenant, key, model, route, day or hour)";
        for (const auto& have : out.group_by)
          if (have == g) return "group_by: \"" + g + "\" given twice";
        out.group_by.push_back(g);
      }
      bool day = false, hour = false;
      for (const auto& g : out.group_by) day = day || g == "day", hour = hour || g == "hour";
      if (day && hour) return std::string("group_by: day or hour, not both");
    } else if (name == "tenant" || name == "key" || name == "model") {
      if (value.empty()) return name + ": empty";
      (name == "tenant" ? out.tenant : name == "key" ? out.key : out.model) = value;
    } else {
      return name + ": unknown parameter (from, to, group_by, tenant, key, model)";
    }
  }
  if (!have_from) return std::string("from: required (a UTC date or date-time)");
  if (out.to.empty()) out.to = std::string(now);
  if (out.to <= out.from) return std::string("to: must be after from");
  return std::nullopt;
}

UsageSql usageSql(Dialect d, const UsageQuery& q) {
  UsageSql s;
  const bool pg = d == Dialect::Postgres;
  auto param = [&](std::string v) {
    s.params.push_back(std::move(v));
    return (pg ? "$" : "?") + std::to_string(s.params.size()) + (pg && s.params.size() <= 2 ? "::timestamptz" : "");
  };
  std::string groups;
  for (const auto& g : q.group_by) groups += groupExpr(d, g) + ", ";
  s.sql = "SELECT " + groups + "count(*), " +
          (pg ? "count(*) FILTER (WHERE status >= 400)" : "coalesce(sum(CASE WHEN status >= 400 THEN 1 ELSE 0 END), 0)") +
          ", coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), coalesce(sum(cached_tokens), 0), " +
          (pg ? "coalesce(sum(cost_usd), 0)::text" : "coalesce(sum(cost_nano_usd), 0)") + " FROM " + std::string(kRecordsTable);
  s.sql += " WHERE ts >= " + param(q.from);
  s.sql += " AND ts < " + param(q.to);
  if (q.tenant) s.sql += " AND tenant = " + param(*q.tenant);
  if (q.key) s.sql += " AND key = " + param(*q.key);
  if (q.model) s.sql += " AND model = " + param(*q.model);
  if (!q.group_by.empty()) {
    std::string ordinals;
    for (std::size_t i = 1; i <= q.group_by.size(); ++i) ordinals += (i > 1 ? ", " : "") + std::to_string(i);
    s.sql += " GROUP BY " + ordinals + " ORDER BY " + ordinals;
  }
  s.sql += " LIMIT " + std::to_string(kMaxUsageGroups + 1);
  return s;
}

std::string nanosToDecimal(long long nanos) {
  if (nanos < 0) return "-" + nanosToDecimal(-nanos);
  std::string whole = std::to_string(nanos / 1'000'000'000);
  std::string frac = std::to_string(nanos % 1'000'000'000);
  frac.insert(0, 9 - frac.size(), '0');
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return frac.empty() ? whole : whole + "." + frac;
}

const UsageSinkConfig* ledgerSink(const UsageConfig& usage) {
  if (!usage.enabled) return nullptr;
  for (const auto& s : usage.sinks)
    if (s.type == UsageSinkConfig::Type::Sqlite || s.type == UsageSinkConfig::Type::Postgres) return &s;
  return nullptr;
}

namespace {

// Rows as text cells, in the select's order; null cells as nullopt.
using Row = std::vector<std::optional<std::string>>;

bool querySqlite(const UsageSinkConfig& c, const UsageSql& s, std::vector<Row>& rows, std::string& error) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(c.path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    error = c.path + ": " + (db ? sqlite3_errmsg(db) : "cannot open");
    sqlite3_close(db);
    return false;
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> hold(db, sqlite3_close);
  sqlite3_busy_timeout(db, 5000);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, s.sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    error = c.path + ": " + sqlite3_errmsg(db);
    return false;
  }
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> finalize(st, sqlite3_finalize);
  for (std::size_t i = 0; i < s.params.size(); ++i)
    sqlite3_bind_text(st, static_cast<int>(i + 1), s.params[i].data(), static_cast<int>(s.params[i].size()), SQLITE_STATIC);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    Row r;
    for (int i = 0; i < sqlite3_column_count(st); ++i) {
      const unsigned char* t = sqlite3_column_text(st, i);
      r.push_back(t ? std::optional<std::string>(reinterpret_cast<const char*>(t)) : std::nullopt);
    }
    rows.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) {
    error = c.path + ": " + sqlite3_errmsg(db);
    return false;
  }
  return true;
}

bool queryPostgres(const UsageSinkConfig& c, const UsageSql& s, std::vector<Row>& rows, std::string& error) {
  if (c.dsn.empty()) {
    error = "no connection string: the variable " + c.dsn_env + " (dsn_env) was not set at start";
    return false;
  }
  const std::string timeout = std::to_string(std::max<long long>(2, (c.timeout.count() + 999) / 1000));
  // A question bounded server-side too: a heavy one cannot hold the database.
  std::vector<const char*> keys{"dbname", "connect_timeout", "fallback_application_name", "options"};
  std::vector<const char*> values{c.dsn.c_str(), timeout.c_str(), "tahua-query", "-c statement_timeout=10s -c default_transaction_read_only=on"};
  if (!c.password.empty()) {
    keys.push_back("password");
    values.push_back(c.password.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  std::unique_ptr<PGconn, void (*)(PGconn*)> conn(PQconnectdbParams(keys.data(), values.data(), 1), PQfinish);
  auto scrubbed = [&](const char* text) {
    std::string m = text ? text : "";
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    if (!c.password.empty())
      for (auto at = m.find(c.password); at != std::string::npos; at = m.find(c.password)) m.replace(at, c.password.size(), "***");
    // The whole connection string may hold a password too (dsn_env): never echoed.
    if (!c.dsn.empty())
      for (auto at = m.find(c.dsn); at != std::string::npos; at = m.find(c.dsn)) m.replace(at, c.dsn.size(), "***");
    return m;
  };
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    error = "postgres: " + scrubbed(conn ? PQerrorMessage(conn.get()) : "out of memory");
    if (PQconninfoOption* o = PQconninfoParse(c.dsn.c_str(), nullptr)) {  // the dsn's own password, if any
      for (PQconninfoOption* p = o; p->keyword; ++p)
        if (std::string_view(p->keyword) == "password" && p->val && *p->val)
          for (auto at = error.find(p->val); at != std::string::npos; at = error.find(p->val)) error.replace(at, std::strlen(p->val), "***");
      PQconninfoFree(o);
    }
    return false;
  }
  PQsetNoticeProcessor(conn.get(), [](void*, const char*) {}, nullptr);
  std::vector<const char*> params;
  for (const auto& p : s.params) params.push_back(p.c_str());
  std::unique_ptr<PGresult, void (*)(PGresult*)> r(
      PQexecParams(conn.get(), s.sql.c_str(), static_cast<int>(params.size()), nullptr, params.data(), nullptr, nullptr, 0), PQclear);
  if (!r || PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    error = "postgres: " + scrubbed(r ? PQresultErrorMessage(r.get()) : PQerrorMessage(conn.get()));
    return false;
  }
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    Row row;
    for (int j = 0; j < PQnfields(r.get()); ++j)
      row.push_back(PQgetisnull(r.get(), i, j) ? std::nullopt : std::optional<std::string>(PQgetvalue(r.get(), i, j)));
    rows.push_back(std::move(row));
  }
  return true;
}

}  // namespace

bool runUsageQuery(const UsageSinkConfig& sink, const UsageQuery& q, std::string& json, std::string& error) {
  const Dialect d = sink.type == UsageSinkConfig::Type::Postgres ? Dialect::Postgres : Dialect::Sqlite;
  const UsageSql s = usageSql(d, q);
  std::vector<Row> rows;
  if (!(d == Dialect::Postgres ? queryPostgres(sink, s, rows, error) : querySqlite(sink, s, rows, error))) return false;
  const bool truncated = rows.size() > kMaxUsageGroups;
  if (truncated) rows.resize(kMaxUsageGroups);
  json = "{\"from\":";
  jsonString(json, q.from);
  json += ",\"to\":";
  jsonString(json, q.to);
  json += ",\"group_by\":[";
  for (std::size_t i = 0; i < q.group_by.size(); ++i) {
    if (i) json.push_back(',');
    jsonString(json, q.group_by[i]);
  }
  json += "],\"groups\":[";
  static constexpr const char* kSums[] = {"requests", "errors", "input_tokens", "output_tokens", "cached_tokens"};
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const std::size_t g = q.group_by.size();
    if (row.size() != g + 6) {
      error = "unexpected answer from the database";
      return false;
    }
    json += r ? ",{" : "{";
    for (std::size_t i = 0; i < g; ++i) {
      jsonString(json, q.group_by[i]);
      json.push_back(':');
      if (row[i]) jsonString(json, *row[i]);
      else json += "null";
      json.push_back(',');
    }
    for (std::size_t i = 0; i < 5; ++i) {
      json += "\"" + std::string(kSums[i]) + "\":" + std::to_string(std::stoll(row[g + i].value_or("0"))) + ",";
    }
    const std::string cost = row[g + 5].value_or("0");
    json += "\"cost_usd\":";
    json += d == Dialect::Postgres ? cost : nanosToDecimal(std::stoll(cost));
    json.push_back('}');
  }
  json += "],\"truncated\":";
  json += truncated ? "true" : "false";
  json += "}";
  return true;
}

}  // namespace tahua::ledger
