// The observability sections: tracing, usage and access_log (config/telemetry_config.h).
#include <unistd.h>
#include <cctype>

#include <set>

#include "config/loader_detail.h"
#include "core/redis_url.h"
#include "http/http_url.h"

namespace tahua::config_detail {
namespace {

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
  const std::string p = "tracing";
  checkKeys(n, p, {"enabled", "endpoint", "headers", "service_name", "sample_ratio", "capture_content", "max_queue_spans",
                   "max_batch_spans", "flush_interval", "timeout"});
  if (auto v = n["endpoint"]) {
    t.endpoint = nonEmpty(v, p + ".endpoint");
    std::string why;
    if (!parseHttpUrl(t.endpoint, &why, true)) fail(v, p + ".endpoint", why + " (expected http(s)://host:port/v1/traces)");
  }
  t.enabled = !t.endpoint.empty();
  if (auto v = n["enabled"]) t.enabled = boolean(v, p + ".enabled");
  if (t.enabled && t.endpoint.empty()) fail(n, p + ".endpoint", "required: where spans are sent (OTLP/HTTP)");
  if (auto v = n["headers"]) t.headers = headerMap(v, p + ".headers");
  if (auto v = n["service_name"]) t.service_name = nonEmpty(v, p + ".service_name");
  if (auto v = n["sample_ratio"]) t.sample_ratio = number(v, p + ".sample_ratio", "a ratio", 1);
  if (auto v = n["capture_content"]) t.capture_content = boolean(v, p + ".capture_content");
  if (auto v = n["max_queue_spans"]) t.max_queue_spans = integer(v, p + ".max_queue_spans", 1, 10'000'000);
  if (auto v = n["max_batch_spans"]) t.max_batch_spans = integer(v, p + ".max_batch_spans", 1, 100'000);
  if (auto v = n["flush_interval"]) t.flush_interval = duration(v, p + ".flush_interval", Millis(10));
  if (auto v = n["timeout"]) t.timeout = duration(v, p + ".timeout", Millis(1));
}

void Loader::loadUsage(const YAML::Node& n, UsageConfig& u, const Config& cfg) {
  const std::string p = "usage";
  checkKeys(n, p, {"enabled", "spill_dir", "spill_max_bytes", "max_queue_records", "retry_backoff", "gateway_id", "sinks"});
  u.enabled = true;
  if (auto v = n["enabled"]) u.enabled = boolean(v, p + ".enabled");
  if (auto v = n["spill_dir"]) u.spill_dir = nonEmpty(v, p + ".spill_dir");
  if (auto v = n["spill_max_bytes"]) u.spill_max_bytes = integer(v, p + ".spill_max_bytes", 1 << 20, 1ull << 44);
  if (auto v = n["max_queue_records"]) u.max_queue_records = integer(v, p + ".max_queue_records", 256, 10'000'000);
  if (auto v = n["retry_backoff"]) u.retry_backoff = duration(v, p + ".retry_backoff", Millis(10));
  if (auto v = n["gateway_id"]) u.gateway_id = nonEmpty(v, p + ".gateway_id");
  if (u.gateway_id.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) u.gateway_id = host;
  }
  if (!u.enabled) return;
  if (u.spill_dir.empty()) fail(n, p + ".spill_dir", "required: where records wait while a sink is down");
  const YAML::Node& s = n["sinks"];
  if (!s || !s.IsSequence() || s.size() == 0) fail(s ? s : n, p + ".sinks", "required: a non-empty list of sinks");
  std::set<std::string> names;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::string sp = p + ".sinks[" + std::to_string(i) + "]";
    const YAML::Node& y = s[i];
    checkKeys(y, sp, {"name", "type", "path", "rotate_bytes", "rotate_interval", "keep", "url", "username", "password_env",
                      "stream", "maxlen", "headers", "batch", "timeout"});
    UsageSinkConfig c;
    if (!y["type"]) fail(y, sp + ".type", "required: file, redis_stream or webhook");
    const std::string type = nonEmpty(y["type"], sp + ".type");
    if (type == "file") c.type = UsageSinkConfig::Type::File;
    else if (type == "redis_stream") c.type = UsageSinkConfig::Type::RedisStream;
    else if (type == "webhook") c.type = UsageSinkConfig::Type::Webhook;
    else fail(y["type"], sp + ".type", "expected file, redis_stream or webhook, got \"" + type + "\"");
    c.name = y["name"] ? nonEmpty(y["name"], sp + ".name") : type;
    if (c.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
      fail(y["name"] ? y["name"] : y, sp + ".name", "letters, digits, - and _ only (it names the spill file)");
    if (!names.insert(c.name).second) fail(y["name"] ? y["name"] : y, sp + ".name", "another sink has the name \"" + c.name + "\"");
    auto only = [&](std::initializer_list<const char*> keys, const char* for_type) {
      for (const char* k : keys)
        if (y[k]) fail(y[k], sp + "." + k, std::string("not a setting of a ") + for_type + " sink");
    };
    switch (c.type) {
      case UsageSinkConfig::Type::File:
        only({"url", "username", "password_env", "stream", "maxlen", "headers", "batch"}, "file");
        if (!y["path"]) fail(y, sp + ".path", "required");
        c.path = nonEmpty(y["path"], sp + ".path");
        if (auto v = y["rotate_bytes"]) c.rotate_bytes = integer(v, sp + ".rotate_bytes", 1024, 1ull << 44);
        if (auto v = y["rotate_interval"]) c.rotate_interval = duration(v, sp + ".rotate_interval");
        if (auto v = y["keep"]) c.keep = static_cast<unsigned>(integer(v, sp + ".keep", 1, 10'000));
        break;
      case UsageSinkConfig::Type::RedisStream:
        only({"path", "rotate_bytes", "rotate_interval", "keep", "headers", "batch"}, "redis_stream");
        if (auto v = y["url"]) {
          c.url = nonEmpty(v, sp + ".url");
          RedisEndpoint parsed;
          if (auto e = parseRedisUrl(c.url, parsed)) fail(v, sp + ".url", *e);
        } else if (cfg.store.type != StoreConfig::Type::Redis) {
          fail(y, sp + ".url", "required when the state store is not Redis");
        }
        c.auth = redisCredentials(y, sp, c.url, "the sink is not connected to (its records spill)");
        if (c.url.empty()) {
          // The store's Redis, and its credentials unless the sink has its own.
          c.url = cfg.store.redis.url;
          if (c.auth.password_env.empty()) c.auth = cfg.store.redis.auth;
        }
        if (auto v = y["stream"]) c.stream = nonEmpty(v, sp + ".stream");
        if (auto v = y["maxlen"]) c.maxlen = integer(v, sp + ".maxlen", 1000, 1'000'000'000);
        break;
      case UsageSinkConfig::Type::Webhook: {
        only({"path", "rotate_bytes", "rotate_interval", "keep", "stream", "maxlen", "username", "password_env"}, "webhook");
        if (!y["url"]) fail(y, sp + ".url", "required");
        c.url = nonEmpty(y["url"], sp + ".url");
        std::string why;
        if (!parseHttpUrl(c.url, &why, true)) fail(y["url"], sp + ".url", why);
        if (auto v = y["headers"]) c.headers = headerMap(v, sp + ".headers");
        if (auto v = y["batch"]) c.batch = integer(v, sp + ".batch", 1, 100'000);
        break;
      }
    }
    if (auto v = y["timeout"]) c.timeout = duration(v, sp + ".timeout", Millis(1));
    u.sinks.push_back(std::move(c));
  }
}

void Loader::loadAccessLog(const YAML::Node& n, AccessLogConfig& a) {
  checkKeys(n, "access_log", {"enabled", "path", "sample_success", "max_pending_bytes"});
  if (auto v = n["enabled"]) a.enabled = boolean(v, "access_log.enabled");
  if (auto v = n["path"]) a.path = nonEmpty(v, "access_log.path");
  if (auto v = n["sample_success"]) a.sample_success = number(v, "access_log.sample_success", "a ratio", 1);
  if (auto v = n["max_pending_bytes"]) a.max_pending_bytes = integer(v, "access_log.max_pending_bytes", 65536, 1ull << 32);
}

}  // namespace tahua::config_detail
