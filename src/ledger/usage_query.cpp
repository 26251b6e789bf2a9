#include "ledger/usage_query.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "ledger/ledger_rollups.h"

namespace tahua::ledger {
namespace {

bool digits(std::string_view s, std::size_t at, std::size_t n) {
  if (at + n > s.size()) return false;
  for (std::size_t i = at; i < at + n; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// The SQL expression of a group, per database (`route` is the record's route_name);
// `zone`: the parameter naming tz (PostgreSQL), empty for UTC.
std::string groupExpr(Dialect d, std::string_view g, const std::string& zone) {
  if (g == "route") return "route_name";
  if (g == "day") {
    if (d == Dialect::Sqlite) return "substr(ts, 1, 10)";
    return zone.empty() ? "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD')" : "to_char(ts AT TIME ZONE " + zone + ", 'YYYY-MM-DD')";
  }
  if (g == "hour") {
    if (d == Dialect::Sqlite) return "substr(ts, 1, 13) || ':00Z'";
    // In a zone, the local hour without an offset (the hour a clock going back repeats
    // is one group).
    return zone.empty() ? "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24\":00Z\"')"
                        : "to_char(ts AT TIME ZONE " + zone + ", 'YYYY-MM-DD\"T\"HH24\":00\"')";
  }
  return std::string(g);  // tenant, key, model: columns of those names
}

bool validZoneName(std::string_view z) {
  if (z.empty() || z.size() > 64 || !std::isalpha(static_cast<unsigned char>(z[0]))) return false;
  for (char c : z)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '/' && c != '_' && c != '-' && c != '+') return false;
  return z.find("//") == std::string_view::npos && z.back() != '/';
}

// "p50 p95" (SQLite's tahua_percentiles) or "{p50,p95}" (PostgreSQL's array) as two
// JSON numbers; nulls when the group had no value.
std::pair<Cell, Cell> percentiles(const Cell& c) {
  if (!c) return {};
  std::string s = *c;
  for (char& ch : s)
    if (ch == '{' || ch == '}' || ch == ',') ch = ' ';
  char* end = nullptr;
  const double p50 = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return {};
  char* end2 = nullptr;
  const double p95 = std::strtod(end, &end2);
  if (end2 == end) return {};
  return {formatMillis(p50), formatMillis(p95)};
}

constexpr long long kHourMs = 3'600'000;

// A UTC time (normalizeUtc's form) rounded up or down to its hour.
std::string ceilHour(const std::string& iso) {
  const long long ms = isoToMillis(iso).value_or(0);
  return millisToIso((ms + kHourMs - 1) / kHourMs * kHourMs);
}
std::string floorHour(const std::string& iso) {
  const long long ms = isoToMillis(iso).value_or(0);
  return millisToIso(ms / kHourMs * kHourMs);
}

bool namesKey(const UsageQuery& q) {
  return q.key.has_value() || std::find(q.group_by.begin(), q.group_by.end(), "key") != q.group_by.end();
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

std::optional<std::string> checkRange(std::string_view from, std::string_view to, std::chrono::milliseconds max_range) {
  if (to <= from) return std::string("to: must be after from");
  if (max_range.count() <= 0) return std::nullopt;
  const auto a = isoToMillis(from), b = isoToMillis(to);
  if (a && b && *b - *a > max_range.count()) {
    const long long hours = max_range.count() / 3'600'000;
    return "to: the range is longer than the ledger's query_max_range (" +
           (hours % 24 == 0 ? std::to_string(hours / 24) + "d" : std::to_string(hours) + "h") +
           ", usage.sinks[].query_max_range): narrow from..to";
  }
  return std::nullopt;
}

std::optional<std::string> parseUsageQuery(std::string_view query, std::string_view now, UsageQuery& out,
                                           std::chrono::milliseconds max_range) {
  bool have_from = false;
  std::string from_text, to_text;
  for (const auto& [name, value] : queryParams(query)) {
    if (value.size() > 256) return name + ": longer than 256 characters";
    if (name == "from" || name == "to") {
      auto t = normalizeUtc(value);
      if (!t) return name + ": expected a UTC date (2026-12-05) or date-time (2026-12-05T10:00:00Z), got \"" + value + "\"";
      (name == "from" ? out.from : out.to) = *t;
      (name == "from" ? from_text : to_text) = value;
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
    } else if (name == "tz") {
      if (!validZoneName(value)) return "tz: expected an IANA time zone name (Europe/Berlin), got \"" + value + "\"";
      out.tz = value == "UTC" || value == "Etc/UTC" ? std::string() : value;
    } else {
      return name + ": unknown parameter (from, to, group_by, tenant, key, model, tz)";
    }
  }
  if (!have_from) return std::string("from: required (a UTC date or date-time)");
  if (out.to.empty()) out.to = std::string(now);
  // In a zone, a date is that day's local midnight.
  out.from_local = !out.tz.empty() && from_text.size() == 10;
  out.to_local = !out.tz.empty() && to_text.size() == 10;
  return checkRange(out.from, out.to, max_range);
}

std::optional<std::string> zoneRefusal(Dialect d, const UsageQuery& q) {
  if (q.tz.empty() || d == Dialect::Postgres) return std::nullopt;
  return "tz: days and hours in a time zone need the PostgreSQL ledger (SQLite has no zone database); ask without tz "
         "for UTC";
}

UsageSql usageSql(Dialect d, const UsageQuery& q) {
  UsageSql s;
  const bool pg = d == Dialect::Postgres;
  auto param = [&](std::string v) {
    s.params.push_back(std::move(v));
    return (pg ? "$" : "?") + std::to_string(s.params.size());
  };
  // tz's parameter comes last: numbered ahead, after from, to and the filters.
  const bool zone = pg && !q.tz.empty();
  const std::string zone_param =
      zone ? "$" + std::to_string(3 + (q.tenant ? 1 : 0) + (q.key ? 1 : 0) + (q.model ? 1 : 0)) + "::text" : std::string();
  auto bound = [&](const std::string& iso, bool local) {
    if (!pg) return param(iso);
    if (local) return "(" + param(iso.substr(0, 10)) + "::timestamp AT TIME ZONE " + zone_param + ")";
    return param(iso) + "::timestamptz";
  };
  std::string where = " WHERE ts >= " + bound(q.from, q.from_local);
  where += " AND ts < " + bound(q.to, q.to_local);
  if (q.tenant) where += " AND tenant = " + param(*q.tenant);
  if (q.key) where += " AND key = " + param(*q.key);
  if (q.model) where += " AND model = " + param(*q.model);
  if (zone) s.params.push_back(q.tz);

  std::string groups;
  for (const auto& g : q.group_by) groups += groupExpr(d, g, zone_param) + ", ";
  auto pct = [&](const std::string& x) {
    return pg ? "percentile_cont(ARRAY[0.5, 0.95]::float8[]) WITHIN GROUP (ORDER BY " + x + ")::text" : "tahua_percentiles(" + x + ")";
  };
  s.sql = "SELECT " + groups + "count(*), " +
          (pg ? "count(*) FILTER (WHERE status >= 400)" : "coalesce(sum(CASE WHEN status >= 400 THEN 1 ELSE 0 END), 0)") +
          ", coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), coalesce(sum(cached_tokens), 0), " +
          (pg ? "coalesce(sum(cost_usd), 0)::text" : "coalesce(sum(cost_nano_usd), 0)") + ", " +
          (pg ? "count(*) FILTER (WHERE cache IN ('hit', 'semantic-hit'))"
              : "coalesce(sum(CASE WHEN cache IN ('hit', 'semantic-hit') THEN 1 ELSE 0 END), 0)") +
          ", coalesce(sum(cache_tokens_saved), 0), " + pct("duration_ms") + ", " +
          pct(pg ? "CASE WHEN stream THEN ttft_ms END" : "CASE WHEN stream = 1 THEN ttft_ms END") + " FROM " +
          std::string(kRecordsTable) + where;
  if (!q.group_by.empty()) {
    std::string ordinals;
    for (std::size_t i = 1; i <= q.group_by.size(); ++i) ordinals += (i > 1 ? ", " : "") + std::to_string(i);
    s.sql += " GROUP BY " + ordinals + " ORDER BY " + ordinals;
  }
  s.sql += " LIMIT " + std::to_string(kMaxUsageGroups + 1);
  return s;
}

bool rollupsAnswer(const UsageQuery& q) {
  if (namesKey(q)) return false;
  // A local date is the zone's midnight: a whole UTC hour when the zone is (zoneCheckSql).
  const std::string a = q.from_local ? q.from : ceilHour(q.from), b = q.to_local ? q.to : floorHour(q.to);
  return q.from_local || q.to_local || a < b;
}

ReadStatement zoneCheckSql(const UsageQuery& q) {
  // Every hour of the range (a day more either side: a local date's midnight is within
  // a day of the UTC one): the zone's offset a whole number of hours.
  ReadStatement s;
  s.sql = "SELECT coalesce(bool_and(extract(epoch FROM (h AT TIME ZONE $1::text) - (h AT TIME ZONE 'UTC'))::bigint % 3600 = 0), true)::text "
          "FROM generate_series($2::timestamptz - interval '1 day', $3::timestamptz + interval '1 day', interval '1 hour') h";
  s.params = {q.tz, q.from, q.to};
  return s;
}

UsageSql usageRollupSql(Dialect d, const UsageQuery& q) {
  UsageSql s;
  const bool pg = d == Dialect::Postgres;
  auto param = [&](std::string v) {
    s.params.push_back(std::move(v));
    return (pg ? "$" : "?") + std::to_string(s.params.size());
  };
  const bool zone = pg && !q.tz.empty();
  const std::string zone_param =
      zone ? "$" + std::to_string(3 + (q.tenant ? 1 : 0) + (q.model ? 1 : 0)) + "::text" : std::string();
  auto bound = [&](const std::string& iso, bool local) {
    if (!pg) return param(iso);
    if (local) return "(" + param(iso.substr(0, 10)) + "::timestamp AT TIME ZONE " + zone_param + ")";
    return param(iso) + "::timestamptz";
  };
  const std::string from = bound(q.from, q.from_local), to = bound(q.to, q.to_local);
  std::string filters;
  if (q.tenant) filters += " AND tenant = " + param(*q.tenant);
  if (q.model) filters += " AND model = " + param(*q.model);
  if (zone) s.params.push_back(q.tz);
  // The whole hours: [a, b). The part hours before a and from b come from the rows.
  std::string a = from, b = to;
  if (!q.from_local && ceilHour(q.from) != q.from) a = bound(ceilHour(q.from), false);
  if (!q.to_local && floorHour(q.to) != q.to) b = bound(floorHour(q.to), false);

  // Each part a row per rollup row or record, its columns named as the rollup table's.
  const std::string cost = pg ? "cost_usd" : "cost_nano_usd";
  std::vector<std::string> names;
  for (auto c : rollupSumColumns(d)) names.emplace_back(c);
  std::string rollup = "SELECT hour AS ts, nullif(tenant, '') AS tenant, nullif(model, '') AS model, nullif(route_name, '') AS route_name";
  for (const auto& c : names) rollup += ", " + c;
  std::string rows = std::string("SELECT ts, tenant, model, route_name, 1 AS requests, ") +
                     (pg ? "(status >= 400)::integer" : "(status >= 400)") + " AS errors, prompt_tokens, completion_tokens, cached_tokens, " +
                     cost + ", " + (pg ? "(cache IN ('hit', 'semantic-hit'))::integer" : "(cache IN ('hit', 'semantic-hit'))") +
                     " AS cache_hits, cache_tokens_saved";
  for (std::string_view m : {"duration", "ttft"})
    for (int k = 0; k < kHistogramBuckets; ++k) {
      const std::string c = histogramColumn(m, k);
      names.push_back(c);
      rollup += ", " + c;
      rows += std::string(", CASE WHEN ") + (m == "duration" ? "db" : "tb") + " = " + std::to_string(k) + " THEN 1 END AS " + c;
    }
  rollup += " FROM " + std::string(kRollupTable) + " WHERE hour >= " + a + " AND hour < " + b + filters;
  std::string edges;
  if (a != from) edges += "(ts >= " + from + " AND ts < " + a + ")";
  if (b != to) edges += std::string(edges.empty() ? "" : " OR ") + "(ts >= " + b + " AND ts < " + to + ")";

  std::string groups, ordinals, outer_groups;
  for (std::size_t i = 0; i < q.group_by.size(); ++i) {
    groups += groupExpr(d, q.group_by[i], zone_param) + " AS g" + std::to_string(i) + ", ";
    outer_groups += "g" + std::to_string(i) + ", ";
    ordinals += (i ? ", " : "") + std::to_string(i + 1);
  }
  // The answer's cells: the sums (0 for none; the cost as text) and the bucket counts.
  auto finalSums = [&](auto column) {
    std::string out;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::string sum = "sum(" + column(i) + ")";
      out += (i ? ", " : "") + (i >= 8 ? sum : names[i] == "cost_usd" ? "coalesce(" + sum + ", 0)::text" : "coalesce(" + sum + ", 0)");
    }
    return out;
  };
  // A group all of whose records went (superseded elsewhere, pruned) is no group.
  auto tail = [&](const std::string& requests) {
    return q.group_by.empty() ? std::string() : " GROUP BY " + ordinals + " HAVING sum(" + requests + ") > 0 ORDER BY " + ordinals;
  };
  if (edges.empty()) {
    s.sql = "SELECT " + groups + finalSums([&](std::size_t i) { return names[i]; }) + " FROM (" + rollup + ") u" + tail("requests");
  } else {
    // The whole hours and the part hours summed apart (each a plain aggregate), then
    // added per group: a few rows, where one UNION under one GROUP BY carried every row.
    std::string part_sums;
    for (std::size_t i = 0; i < names.size(); ++i) part_sums += (i ? ", sum(" : "sum(") + names[i] + ") AS v" + std::to_string(i);
    const std::string part_group = q.group_by.empty() ? std::string() : " GROUP BY " + ordinals;
    const std::string recent = rows + " FROM (SELECT *, " + bucketSql(d, "duration_ms") + " AS db, CASE WHEN " +
                               (pg ? "stream" : "stream = 1") + " THEN " + bucketSql(d, "ttft_ms") + " END AS tb FROM " +
                               std::string(kRecordsTable) + " WHERE (" + edges + ")" + filters + ") e";
    s.sql = "SELECT " + outer_groups + finalSums([](std::size_t i) { return "v" + std::to_string(i); }) + " FROM (SELECT " + groups + part_sums +
            " FROM (" + rollup + ") r" + part_group + " UNION ALL SELECT " + groups + part_sums + " FROM (" + recent + ") x" + part_group + ") u" +
            tail("v0");
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


std::optional<ReadFailure> runUsageQuery(const UsageSinkConfig& sink, const UsageQuery& q, AnswerFormat format, UsageAnswer& answer) {
  const Dialect d = sink.type == UsageSinkConfig::Type::Postgres ? Dialect::Postgres : Dialect::Sqlite;
  bool rollups = rollupsAnswer(q);
  if (rollups && d == Dialect::Postgres && !q.tz.empty()) {
    // A zone whose offset is not whole hours (Asia/Kolkata) cuts UTC hours: the rows answer.
    std::vector<Row> check;
    if (auto failed = readLedger(sink, zoneCheckSql(q), 1, check)) return failed;
    rollups = !check.empty() && check[0].size() == 1 && check[0][0] == "true";
  }
  const UsageSql s = rollups ? usageRollupSql(d, q) : usageSql(d, q);
  std::vector<Row> rows;
  if (auto failed = readLedger(sink, s, kMaxUsageGroups + 1, rows)) return failed;
  answer.truncated = rows.size() > kMaxUsageGroups;
  if (answer.truncated) rows.resize(kMaxUsageGroups);

  using K = Table::Kind;
  Table t;
  for (const auto& g : q.group_by) t.columns.push_back({g, K::Text});
  for (const char* n : {"requests", "errors", "input_tokens", "output_tokens", "cached_tokens", "cost_usd", "cache_hits",
                        "cache_tokens_saved", "latency_p50_ms", "latency_p95_ms", "ttft_p50_ms", "ttft_p95_ms"})
    t.columns.push_back({n, K::Literal});
  const std::size_t g = q.group_by.size();
  const std::size_t width = rollups ? g + 8 + 2 * kHistogramBuckets : g + 10;
  for (Row& row : rows) {
    if (row.size() != width) return ReadFailure{ReadFailure::Kind::Unavailable, "unexpected answer from the database"};
    std::vector<Cell> cells(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(g));
    for (std::size_t i = 0; i < 5; ++i) cells.push_back(std::to_string(std::stoll(row[g + i].value_or("0"))));
    const std::string cost = row[g + 5].value_or("0");
    cells.push_back(d == Dialect::Postgres ? cost : nanosToDecimal(std::stoll(cost)));
    cells.push_back(std::to_string(std::stoll(row[g + 6].value_or("0"))));
    cells.push_back(std::to_string(std::stoll(row[g + 7].value_or("0"))));
    if (rollups) {
      std::vector<std::int64_t> counts(kHistogramBuckets);
      for (std::size_t m = 0; m < 2; ++m) {
        for (std::size_t k = 0; k < counts.size(); ++k)
          counts[k] = std::strtoll(row[g + 8 + m * kHistogramBuckets + k].value_or("0").c_str(), nullptr, 10);
        for (double p : {0.5, 0.95}) {
          const auto v = histogramPercentile(counts, p);
          cells.push_back(v ? Cell(formatMillis(*v)) : std::nullopt);
        }
      }
    } else {
      for (std::size_t i = 8; i < 10; ++i) {
        auto [p50, p95] = percentiles(row[g + i]);
        cells.push_back(std::move(p50));
        cells.push_back(std::move(p95));
      }
    }
    t.rows.push_back(std::move(cells));
  }
  if (format == AnswerFormat::Csv) {
    answer.body = tableCsv(t);
    return std::nullopt;
  }
  std::string& json = answer.body;
  json = "{\"from\":";
  jsonString(json, q.from_local ? q.from.substr(0, 10) : q.from);
  json += ",\"to\":";
  jsonString(json, q.to_local ? q.to.substr(0, 10) : q.to);
  if (!q.tz.empty()) {
    json += ",\"tz\":";
    jsonString(json, q.tz);
  }
  json += ",\"group_by\":[";
  for (std::size_t i = 0; i < q.group_by.size(); ++i) {
    if (i) json.push_back(',');
    jsonString(json, q.group_by[i]);
  }
  json += "],\"percentiles\":";
  json += rollups ? "\"histogram\"" : "\"exact\"";
  json += ",\"groups\":";
  appendJsonRows(json, t);
  json += ",\"truncated\":";
  json += answer.truncated ? "true" : "false";
  json += "}";
  return std::nullopt;
}

}  // namespace tahua::ledger
