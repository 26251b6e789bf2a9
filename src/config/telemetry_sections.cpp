// The observability sections: tracing, usage and access_log (config/telemetry_config.h).
#include <unistd.h>
#include <cctype>

#include <cstdlib>
#include <set>

#include <postgresql/libpq-fe.h>

#include "config/loader_detail.h"
#include "core/redis_url.h"
#include "http/http_url.h"

namespace tahua::config_detail {
namespace {

using namespace schema;

constexpr Field kAccessLogFields[] = {
    boolean("enabled", "true", "One JSON line per request (docs/observability.md#access-log); false: none."),
    nonEmpty("path", "\"-\"", "`-`: stdout; otherwise a file, appended to.").atRestart(),
    number("sample_success", 1, "1", "Share of successful (< 400) lines written; errors are always written.", "a ratio"),
    integer("max_pending_bytes", 65536, 1ull << 32, "8388608",
            "Bytes of log entries (each line's fields, as the workers hand them over) the writer thread has "
            "not formatted and written yet; past it lines are dropped (tahua_log_lines_dropped_total), never "
            "waited for.")
        .atRestart(),
};
const Table kAccessLog("access_log", "The access log: one JSON line per request, formatted and written by a thread of its own.",
                       kAccessLogFields);

constexpr Field kTracingFields[] = {
    boolean("enabled", "",
            "Default: true when `endpoint` is set; true without one is an error. Turning tracing off applies at a "
            "reload; turning it on, when the gateway started without it, needs a restart."),
    nonEmpty("endpoint", "",
             "Where spans are sent: `http://host:port/v1/traces` (OTLP/HTTP; http:// or https://, checked against the system's CAs). Absent: "
             "tracing is off.")
        .atRestart(),
    choice("protocol", "protobuf | json", "protobuf",
           "OTLP/HTTP's encoding: `protobuf` (`application/x-protobuf`, what collectors expect) or `json` "
           "(`application/json`, the OTLP JSON mapping).")
        .atRestart(),
    map("headers", "{}", "Headers sent with every export (a collector's API key).").atRestart(),
    nonEmpty("service_name", "tahua", "The spans' `service.name`.").atRestart(),
    number("sample_ratio", 1, "1",
           "Share of new traces sampled (the sampled flag sent upstream); a caller's `traceparent` flag wins, and "
           "a failed request is exported whatever the decision.",
           "a ratio"),
    boolean("capture_content", "false",
            "Prompt and completion text on the server span (`gen_ai.input.messages`, `gen_ai.output.messages`), "
            "16 KiB each at most."),
    integer("max_queue_spans", 1, 10'000'000, "16384",
            "Spans waiting for export; past it they are dropped (tahua_trace_spans_dropped_total).")
        .atRestart(),
    integer("max_batch_spans", 1, 100'000, "512", "Spans per export request.").atRestart(),
    duration("flush_interval", 10, "1s", "How often waiting spans are exported.").atRestart(),
    duration("timeout", 1, "5s", "One export request; a failed export drops its batch.").atRestart(),
};
const Table kTracing("tracing", "OpenTelemetry traces: a span per request and per upstream attempt (docs/observability.md).",
                     kTracingFields);

constexpr Field kUsageFields[] = {
    boolean("enabled", "true",
            "The section turns records on; false: none. Turning them off applies at a reload; on, when the gateway "
            "started without them, needs a restart."),
    nonEmpty("spill_dir", "",
             "Required unless `enabled: false`: where a failing sink's records wait (`<sink>.spill`, fdatasynced) "
             "and `usage.state` is kept.")
        .atRestart(),
    integer("spill_max_bytes", 1 << 20, 1ull << 44, "1073741824",
            "A sink's spill file at most; past it records are dropped (counted, logged).")
        .atRestart(),
    integer("max_queue_records", 256, 10'000'000, "65536",
            "Records handed over by the workers and not yet formatted (past it they are dropped, counted), and "
            "records waiting for each sink (past it a sink that is behind gets them in its spill).")
        .atRestart(),
    duration("retry_backoff", 10, "1s", "First retry of a failed sink; it doubles up to 30s.").atRestart(),
    nonEmpty("gateway_id", "", "The replica's name in records (`gateway`). Default: the host name."),
    list("sinks", "",
         "Required unless `enabled: false`: where records go (a file, a Redis stream, a webhook, a SQLite or "
         "PostgreSQL ledger), each delivered at least once.")
        .atRestart(),
};
const Table kUsage("usage", "Usage records for billing, one per finished request (401s excepted), delivered at least once "
                   "to every sink (docs/observability.md#usage-records).",
                   kUsageFields);

constexpr Field kSinkFields[] = {
    nonEmpty("name", "", "Unique: names the sink in metrics and its spill file (letters, digits, - and _). Default: its type.")
        .atRestart(),
    choice("type", "file | redis_stream | webhook | sqlite | postgres", "",
           "Where the records go; sqlite and postgres: the spend ledger (docs/ledger.md).")
        .needed()
        .atRestart(),
    nonEmpty("path", "", "file (required there): the JSON-lines file, appended to. sqlite (required there): the database file.")
        .atRestart(),
    integer("rotate_bytes", 1024, 1ull << 44, "268435456", "file: renamed to `path.1` (`path.2` ...) past this size.")
        .atRestart(),
    duration("rotate_interval", 0, "0s", "file: renamed this often too; 0s: never.").atRestart(),
    integer("keep", 1, 10'000, "10", "file: the newest rotated files kept.").atRestart(),
    nonEmpty("url", "",
             "redis_stream: `redis://...`, default the store's Redis (required when the store is not Redis); "
             "webhook (required there): the `http://` or `https://` URL records are POSTed to.")
        .atRestart(),
    nonEmpty("username", "", "redis_stream: an ACL user (with password_env); without a url: another user on the store's Redis.")
        .atRestart(),
    nonEmpty("password_env", "",
             "redis_stream: the variable holding the password (read at start; unset: a warning, and the sink's records "
             "spill). Without url, username or password_env: the store's credentials. postgres: the variable holding "
             "the password of the `dsn`'s user.")
        .atRestart(),
    nonEmpty("stream", "tahua:usage", "redis_stream: `XADD <stream> MAXLEN ~ <maxlen> * record_id <id> record <json>`.")
        .atRestart(),
    integer("maxlen", 1000, 1'000'000'000, "1000000", "redis_stream: the stream's approximate cap.").atRestart(),
    map("headers", "{}", "webhook: headers sent with every POST (an authorization).").atRestart(),
    integer("batch", 1, 100'000, "500",
            "webhook: records per POST (a JSON array); any 2xx answer is delivery. postgres: records per INSERT "
            "statement (one transaction each).")
        .atRestart(),
    duration("timeout", 1, "5s",
             "redis_stream, webhook and postgres: one delivery (a Redis command, a POST, an INSERT; a connect: at least "
             "2s); past it the sink failed.")
        .atRestart(),
    nonEmpty("dsn", "",
             "postgres: a libpq connection string or URI (`host=db dbname=tahua user=tahua`, "
             "`postgresql://tahua@db/tahua`) holding no password (see password_env). One of dsn and dsn_env is required.")
        .atRestart(),
    nonEmpty("dsn_env", "",
             "postgres: the variable holding the whole connection string, password included (read at start; unset: "
             "a warning, and the sink's records spill).")
        .atRestart(),
    duration("retention", 0, "0s",
             "sqlite and postgres: rows whose `ts` is older are deleted in the background, 1,000 at a time; 0s: kept "
             "for ever. `400d`: 400 days.")
        .atRestart(),
    duration("query_max_range", 3'600'000, "366d",
             "sqlite and postgres: the longest `from`..`to` GET /admin/v1/usage and /admin/v1/requests accept; a longer "
             "range is a 400 naming `to` (a year of rows is the most a query should have to read).")
        .atRestart(),
    integer("max_bytes", 0, 1ull << 50, "0",
            "sqlite: the database file at most (rounded down to pages); past it a write fails as on a full disk (logged, "
            "counted, records spilled). 0: the disk's free space.")
        .atRestart(),
};
const Table kSink("usage.sinks[]", "A place usage records go; the settings of the other types are refused.", kSinkFields);

bool validHeaderName(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Loader::headerMap(const YAML::Node& h, const std::string& p) {
  if (!h.IsMap()) fail(h, p, "expected a mapping of header name to value");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& kv : h) {
    std::string name = str(kv.first, p);
    if (!validHeaderName(name)) fail(kv.first, p, "invalid header name \"" + name + "\"");
    std::string value = str(kv.second, p + "." + name);
    if (value.find_first_of("\r\n") != std::string::npos) fail(kv.second, p + "." + name, "must not contain a line break");
    out.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

void Loader::loadTracing(const YAML::Node& n, TracingConfig& t) {
  Fields f(*this, n, "tracing", kTracing);
  if (f.read("endpoint", t.endpoint)) {
    std::string why;
    if (!parseHttpUrl(t.endpoint, &why, true)) fail(f["endpoint"], f.at("endpoint"), why + " (expected http(s)://host:port/v1/traces)");
  }
  t.enabled = !t.endpoint.empty();
  f.read("enabled", t.enabled);
  if (t.enabled && t.endpoint.empty()) fail(n, f.at("endpoint"), "required: where spans are sent (OTLP/HTTP)");
  std::string protocol = t.protocol == TracingConfig::Protocol::Json ? "json" : "protobuf";
  f.read("protocol", protocol);
  t.protocol = protocol == "json" ? TracingConfig::Protocol::Json : TracingConfig::Protocol::Protobuf;
  if (auto v = f["headers"]) t.headers = headerMap(v, f.at("headers"));
  f.read("service_name", t.service_name);
  f.read("sample_ratio", t.sample_ratio);
  f.read("capture_content", t.capture_content);
  f.read("max_queue_spans", t.max_queue_spans);
  f.read("max_batch_spans", t.max_batch_spans);
  f.read("flush_interval", t.flush_interval);
  f.read("timeout", t.timeout);
}

void Loader::loadUsage(const YAML::Node& n, UsageConfig& u, const Config& cfg) {
  Fields f(*this, n, "usage", kUsage);
  u.enabled = true;
  f.read("enabled", u.enabled);
  f.read("spill_dir", u.spill_dir);
  f.read("spill_max_bytes", u.spill_max_bytes);
  f.read("max_queue_records", u.max_queue_records);
  f.read("retry_backoff", u.retry_backoff);
  f.read("gateway_id", u.gateway_id);
  if (u.gateway_id.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) u.gateway_id = host;
  }
  if (!u.enabled) return;
  if (u.spill_dir.empty()) fail(n, f.at("spill_dir"), "required: where records wait while a sink is down");
  const YAML::Node& s = f["sinks"];
  if (!s || !s.IsSequence() || s.size() == 0) fail(s ? s : n, f.at("sinks"), "required: a non-empty list of sinks");
  std::set<std::string> names;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::string sp = f.at("sinks") + "[" + std::to_string(i) + "]";
    const YAML::Node& y = s[i];
    Fields sf(*this, y, sp, kSink);
    UsageSinkConfig c;
    if (!y["type"]) fail(y, sp + ".type", "required: file, redis_stream, webhook, sqlite or postgres");
    const std::string type = nonEmpty(y["type"], sp + ".type");
    if (type == "file") c.type = UsageSinkConfig::Type::File;
    else if (type == "redis_stream") c.type = UsageSinkConfig::Type::RedisStream;
    else if (type == "webhook") c.type = UsageSinkConfig::Type::Webhook;
    else if (type == "sqlite") c.type = UsageSinkConfig::Type::Sqlite;
    else if (type == "postgres") c.type = UsageSinkConfig::Type::Postgres;
    else fail(y["type"], sp + ".type", "expected file, redis_stream, webhook, sqlite or postgres, got \"" + type + "\"");
    c.name = type;
    sf.read("name", c.name);
    if (c.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
      fail(y["name"] ? y["name"] : y, sp + ".name", "letters, digits, - and _ only (it names the spill file)");
    if (!names.insert(c.name).second) fail(y["name"] ? y["name"] : y, sp + ".name", "another sink has the name \"" + c.name + "\"");
    auto only = [&](std::initializer_list<const char*> keys, const char* for_type) {
      for (const char* k : keys)
        if (y[k]) fail(y[k], sp + "." + k, std::string("not a setting of a ") + for_type + " sink");
    };
    switch (c.type) {
      case UsageSinkConfig::Type::File:
        only({"url", "username", "password_env", "stream", "maxlen", "headers", "batch", "dsn", "dsn_env", "retention", "max_bytes", "query_max_range"}, "file");
        if (!y["path"]) fail(y, sp + ".path", "required");
        sf.read("path", c.path);
        sf.read("rotate_bytes", c.rotate_bytes);
        sf.read("rotate_interval", c.rotate_interval);
        sf.read("keep", c.keep);
        break;
      case UsageSinkConfig::Type::RedisStream:
        only({"path", "rotate_bytes", "rotate_interval", "keep", "headers", "batch", "dsn", "dsn_env", "retention", "max_bytes", "query_max_range"}, "redis_stream");
        if (sf.read("url", c.url)) {
          RedisEndpoint parsed;
          if (auto e = parseRedisUrl(c.url, parsed)) fail(y["url"], sp + ".url", *e);
        } else if (cfg.store.type != StoreConfig::Type::Redis) {
          fail(y, sp + ".url", "required when the state store is not Redis");
        }
        c.auth = redisCredentials(y, sp, c.url, "the sink is not connected to (its records spill)");
        if (c.url.empty()) {
          // The store's Redis, and its credentials unless the sink has its own.
          c.url = cfg.store.redis.url;
          if (c.auth.password_env.empty()) c.auth = cfg.store.redis.auth;
        }
        sf.read("stream", c.stream);
        sf.read("maxlen", c.maxlen);
        break;
      case UsageSinkConfig::Type::Webhook: {
        only({"path", "rotate_bytes", "rotate_interval", "keep", "stream", "maxlen", "username", "password_env", "dsn", "dsn_env",
              "retention", "max_bytes", "query_max_range"}, "webhook");
        if (!y["url"]) fail(y, sp + ".url", "required");
        sf.read("url", c.url);
        std::string why;
        if (!parseHttpUrl(c.url, &why, true)) fail(y["url"], sp + ".url", why);
        if (auto v = sf["headers"]) c.headers = headerMap(v, sf.at("headers"));
        sf.read("batch", c.batch);
        break;
      }
      case UsageSinkConfig::Type::Sqlite:
        only({"url", "username", "password_env", "stream", "maxlen", "headers", "batch", "dsn", "dsn_env", "rotate_bytes",
              "rotate_interval", "keep", "timeout"}, "sqlite");
        if (!y["path"]) fail(y, sp + ".path", "required: the database file");
        sf.read("path", c.path);
        sf.read("max_bytes", c.max_bytes);
        sf.read("retention", c.retention);
        sf.read("query_max_range", c.query_max_range);
        break;
      case UsageSinkConfig::Type::Postgres:
        only({"path", "url", "username", "stream", "maxlen", "headers", "rotate_bytes", "rotate_interval", "keep", "max_bytes"},
             "postgres");
        loadPostgresDsn(y, sp, c);
        sf.read("batch", c.batch);
        sf.read("retention", c.retention);
        sf.read("query_max_range", c.query_max_range);
        break;
    }
    sf.read("timeout", c.timeout);
    u.sinks.push_back(std::move(c));
  }
}

// A postgres sink's connection string: `dsn` (checked by libpq, and holding no password)
// or the variable `dsn_env` names, and the password from `password_env`. libpq's own
// message about a malformed value from the environment is not repeated: it may quote
// the password.
void Loader::loadPostgresDsn(const YAML::Node& y, const std::string& sp, UsageSinkConfig& c) {
  const YAML::Node dsn = y["dsn"], dsn_env = y["dsn_env"], password_env = y["password_env"];
  if (!dsn == !dsn_env) fail(dsn ? dsn : y, sp + (dsn ? ".dsn_env" : ".dsn"), "exactly one of dsn and dsn_env is required");
  auto parse = [](const std::string& text, std::string* why) -> PQconninfoOption* {
    char* err = nullptr;
    PQconninfoOption* o = PQconninfoParse(text.c_str(), &err);
    if (!o && why) *why = err ? err : "out of memory";
    if (err) PQfreemem(err);
    if (why) while (!why->empty() && (why->back() == '\n' || why->back() == ' ')) why->pop_back();
    return o;
  };
  auto hasPassword = [](PQconninfoOption* o) {
    bool found = false;
    for (PQconninfoOption* p = o; p && p->keyword; ++p)
      if (std::string_view(p->keyword) == "password" && p->val && *p->val) found = true;
    PQconninfoFree(o);
    return found;
  };
  if (dsn) {
    c.dsn = nonEmpty(dsn, sp + ".dsn");
    std::string why;
    PQconninfoOption* o = parse(c.dsn, &why);
    if (!o) fail(dsn, sp + ".dsn", "not a libpq connection string: " + why);
    if (hasPassword(o)) fail(dsn, sp + ".dsn", "holds a password: give it in password_env (or the whole string in dsn_env)");
  } else {
    c.dsn_env = nonEmpty(dsn_env, sp + ".dsn_env");
    if (const char* v = std::getenv(c.dsn_env.c_str()); v && *v) {
      if (PQconninfoOption* o = parse(v, nullptr)) PQconninfoFree(o);
      else fail(dsn_env, sp + ".dsn_env", "the value of " + c.dsn_env + " is not a libpq connection string");
      c.dsn = v;
    } else {
      warnings_.push_back(sp + ".dsn_env: environment variable " + c.dsn_env +
                          " is not set (it is read at start); the sink's records spill");
    }
  }
  if (password_env) {
    const std::string name = nonEmpty(password_env, sp + ".password_env");
    if (const char* v = std::getenv(name.c_str()); v && *v) c.password = v;
    else warnings_.push_back(sp + ".password_env: environment variable " + name + " is not set (it is read at start)");
  }
}

void Loader::loadAccessLog(const YAML::Node& n, AccessLogConfig& a) {
  Fields f(*this, n, "access_log", kAccessLog);
  f.read("enabled", a.enabled);
  f.read("path", a.path);
  f.read("sample_success", a.sample_success);
  f.read("max_pending_bytes", a.max_pending_bytes);
}

}  // namespace tahua::config_detail
