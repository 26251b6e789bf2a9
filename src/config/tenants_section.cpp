// Tenants, their API keys, the authentication chains and the limits over all tenants:
// the `tenants`, `keys`, `auth` and `rate_limits` sections.
#include <cctype>
#include <set>

#include "config/loader_detail.h"
#include "core/utc_time.h"
#include "core/redis_url.h"

namespace tahua::config_detail {

constexpr double kMaxBudgetUsd = 1e12;
namespace {

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

constexpr std::string_view kLimitKeys[] = {"requests_per_minute", "tokens_per_minute",       "tokens_per_day",
                                           "tokens_per_month",    "usd_per_day",             "usd_per_month",
                                           "max_concurrent_requests", "max_concurrent_streams"};

}  // namespace

LimitSet Loader::limitSet(const YAML::Node& n, const std::string& p) {
  checkKeys(n, p, kLimitKeys);
  LimitSet l;
  auto count = [&](const char* key, std::int64_t& out) {
    if (auto v = n[key]) out = static_cast<std::int64_t>(integer(v, p + "." + key, 1, 1'000'000'000'000));
  };
  count("requests_per_minute", l.requests_per_minute);
  count("tokens_per_minute", l.tokens_per_minute);
  count("tokens_per_day", l.tokens_per_day);
  count("tokens_per_month", l.tokens_per_month);
  count("max_concurrent_requests", l.max_concurrent_requests);
  count("max_concurrent_streams", l.max_concurrent_streams);
  // A company-wide budget may be large; 1e12 USD still fits the store's micro-USD counters.
  if (auto v = n["usd_per_day"]) l.usd_per_day = number(v, p + ".usd_per_day", "USD", kMaxBudgetUsd);
  if (auto v = n["usd_per_month"]) l.usd_per_month = number(v, p + ".usd_per_month", "USD", kMaxBudgetUsd);
  return l;
}

std::vector<std::string> Loader::modelList(const YAML::Node& n, const std::string& p, const Config& cfg) {
  if (!n.IsSequence()) fail(n, p, "expected a list of model names");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string ip = p + "[" + std::to_string(i) + "]";
    std::string name = nonEmpty(n[i], ip);
    if (!cfg.findModel(name)) fail(n[i], ip, "unknown model \"" + name + "\"");
    out.push_back(std::move(name));
  }
  return out;
}

void Loader::loadTenants(const YAML::Node& n, Config& cfg) {
  if (!n.IsSequence()) fail(n, "tenants", "expected a list of tenants");
  std::set<std::string, std::less<>> names;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string p = "tenants[" + std::to_string(i) + "]";
    const YAML::Node& y = n[i];
    checkKeys(y, p, {"name", "models", "limits", "model_limits"});
    TenantConfig t;
    if (!y["name"]) fail(y, p + ".name", "required");
    t.name = nonEmpty(y["name"], p + ".name");
    for (char c : t.name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
        fail(y["name"], p + ".name", "may only hold letters, digits, '-', '_' and '.'");
    if (!names.insert(t.name).second) fail(y["name"], p + ".name", "duplicate tenant \"" + t.name + "\"");
    if (auto v = y["models"]) t.models = modelList(v, p + ".models", cfg);
    if (auto v = y["limits"]) t.limits = limitSet(v, p + ".limits");
    if (auto m = y["model_limits"]) {
      if (!m.IsMap()) fail(m, p + ".model_limits", "expected a mapping of model name to limits");
      for (const auto& kv : m) {
        const std::string model = str(kv.first, p + ".model_limits");
        const std::string mp = p + ".model_limits." + model;
        if (!cfg.findModel(model)) fail(kv.first, mp, "unknown model \"" + model + "\"");
        t.model_limits.emplace_back(model, limitSet(kv.second, mp));
      }
    }
    cfg.tenants.push_back(std::move(t));
  }
}

void Loader::loadKeys(const YAML::Node& n, Config& cfg) {
  if (!n.IsSequence()) fail(n, "keys", "expected a list of API keys");
  std::set<std::string, std::less<>> names;
  std::set<std::array<unsigned char, 32>> digests;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string p = "keys[" + std::to_string(i) + "]";
    const YAML::Node& y = n[i];
    checkKeys(y, p, {"name", "tenant", "sha256", "prefix", "models", "expires_at", "limits", "metadata"});
    ApiKeyConfig k;
    for (const char* req : {"name", "tenant", "sha256"})
      if (!y[req]) fail(y, p + "." + req, "required");
    k.name = nonEmpty(y["name"], p + ".name");
    if (!names.insert(k.name).second) fail(y["name"], p + ".name", "duplicate key name \"" + k.name + "\"");
    k.tenant = nonEmpty(y["tenant"], p + ".tenant");
    const TenantConfig* tenant = nullptr;
    for (const auto& t : cfg.tenants)
      if (t.name == k.tenant) tenant = &t;
    if (!tenant) fail(y["tenant"], p + ".tenant", "unknown tenant \"" + k.tenant + "\" (declare it under `tenants`)");
    // The hash, never the key: a config file in git must not hold secrets.
    const std::string hex = str(y["sha256"], p + ".sha256");
    bool ok = hex.size() == 64;
    for (std::size_t j = 0; ok && j < 32; ++j) {
      const int hi = hexDigit(hex[2 * j]), lo = hexDigit(hex[2 * j + 1]);
      ok = hi >= 0 && lo >= 0;
      if (ok) k.sha256[j] = static_cast<unsigned char>(hi * 16 + lo);
    }
    if (!ok)
      fail(y["sha256"], p + ".sha256",
           "expected the key's SHA-256 as 64 hex digits (printf %s \"$KEY\" | sha256sum), not the key itself");
    if (!digests.insert(k.sha256).second) fail(y["sha256"], p + ".sha256", "the same key is declared twice");
    if (auto v = y["prefix"]) {
      k.prefix = str(v, p + ".prefix");
      if (k.prefix.size() > 12) fail(v, p + ".prefix", "at most 12 characters: a display prefix, not the key");
    }
    if (auto v = y["models"]) {
      k.models = modelList(v, p + ".models", cfg);
      if (!tenant->models.empty())
        for (std::size_t j = 0; j < k.models.size(); ++j) {
          bool allowed = false;
          for (const auto& m : tenant->models) allowed = allowed || m == k.models[j];
          if (!allowed)
            fail(v[j], p + ".models[" + std::to_string(j) + "]",
                 "model \"" + k.models[j] + "\" is not among tenant \"" + k.tenant + "\"'s models");
        }
    }
    if (auto v = y["expires_at"]) {
      k.expires_at = parseUtcTime(str(v, p + ".expires_at"));
      if (k.expires_at < 0) fail(v, p + ".expires_at", "expected a UTC time such as 2027-01-31T00:00:00Z or 2027-01-31");
    }
    if (auto v = y["limits"]) k.limits = limitSet(v, p + ".limits");
    if (auto m = y["metadata"]) {
      if (!m.IsMap()) fail(m, p + ".metadata", "expected a mapping of name to text");
      for (const auto& kv : m) {
        const std::string name = str(kv.first, p + ".metadata");
        k.metadata.emplace_back(name, str(kv.second, p + ".metadata." + name));
      }
    }
    cfg.keys.push_back(std::move(k));
  }
}

void Loader::loadAuth(const YAML::Node& n, Config& cfg) {
  checkKeys(n, "auth", {"enabled", "chains"});
  if (auto v = n["enabled"]) cfg.auth.enabled = boolean(v, "auth.enabled");
  auto c = n["chains"];
  if (!c) return;
  if (!c.IsSequence()) fail(c, "auth.chains", "expected a list of chains");
  for (std::size_t i = 0; i < c.size(); ++i) {
    const std::string p = "auth.chains[" + std::to_string(i) + "]";
    const YAML::Node& y = c[i];
    checkKeys(y, p, {"name", "match", "links"});
    AuthChainConfig chain;
    chain.name = y["name"] ? nonEmpty(y["name"], p + ".name") : "chain-" + std::to_string(i);
    if (auto m = y["match"]) {
      checkKeys(m, p + ".match", {"path_prefix", "headers"});
      if (auto v = m["path_prefix"]) {
        chain.path_prefix = nonEmpty(v, p + ".match.path_prefix");
        if (chain.path_prefix.front() != '/') fail(v, p + ".match.path_prefix", "must start with /");
      }
      if (auto h = m["headers"]) {
        if (!h.IsMap()) fail(h, p + ".match.headers", "expected a mapping of name to value");
        for (const auto& kv : h) {
          std::string name = str(kv.first, p + ".match.headers");
          for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
          chain.headers.emplace_back(name, str(kv.second, p + ".match.headers." + name));
        }
      }
    }
    auto links = y["links"];
    if (!links || !links.IsSequence() || links.size() == 0) fail(links ? links : y, p + ".links", "required: a non-empty list");
    for (std::size_t j = 0; j < links.size(); ++j) {
      const std::string lp = p + ".links[" + std::to_string(j) + "]";
      const YAML::Node& l = links[j];
      AuthLinkConfig link;
      // `api_key` alone, or a mapping with `type` (and its settings).
      const YAML::Node type = l.IsMap() ? l["type"] : l;
      if (l.IsMap()) checkKeys(l, lp, {"type", "tenant", "id"});
      if (!type) fail(l, lp + ".type", "required");
      const std::string t = str(type, lp + (l.IsMap() ? ".type" : ""));
      if (t == "api_key") {
        link.type = AuthLinkConfig::Type::ApiKey;
        if (l.IsMap() && l["tenant"]) fail(l["tenant"], lp + ".tenant", "not used by type api_key");
        if (l.IsMap() && l["id"]) fail(l["id"], lp + ".id", "not used by type api_key");
      } else if (t == "plugin") {
        // The plugin's on_auth (plugins:, or a Plugin resource); checked once every
        // plugin is read (checkAuthPlugins).
        link.type = AuthLinkConfig::Type::Plugin;
        if (!l.IsMap() || !l["id"]) fail(l, lp + ".id", "required for type plugin (the id of a plugin that defines on_auth)");
        if (l["tenant"]) fail(l["tenant"], lp + ".tenant", "not used by type plugin (the plugin names the tenant)");
        link.plugin = nonEmpty(l["id"], lp + ".id");
      } else if (t == "anonymous") {
        link.type = AuthLinkConfig::Type::Anonymous;
        if (!l.IsMap() || !l["tenant"]) fail(l, lp + ".tenant", "required for type anonymous (whose limits its requests count against)");
        link.tenant = nonEmpty(l["tenant"], lp + ".tenant");
        bool known = false;
        for (const auto& tc : cfg.tenants) known = known || tc.name == link.tenant;
        if (!known) fail(l["tenant"], lp + ".tenant", "unknown tenant \"" + link.tenant + "\"");
        if (l["id"]) fail(l["id"], lp + ".id", "not used by type anonymous");
      } else {
        fail(type, lp + ".type", "unknown link type \"" + t + "\" (api_key | anonymous | plugin)");
      }
      chain.links.push_back(std::move(link));
    }
    cfg.auth.chains.push_back(std::move(chain));
  }
}

void Loader::loadTenantTokens(const YAML::Node& n, Config& cfg) {
  const std::string p = "admin.tenant_tokens";
  if (!n.IsSequence()) fail(n, p, "expected a list of {name, tenant, sha256}");
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string ip = p + "[" + std::to_string(i) + "]";
    const YAML::Node& y = n[i];
    checkKeys(y, ip, {"name", "tenant", "sha256"});
    for (const char* req : {"name", "tenant", "sha256"})
      if (!y[req]) fail(y, ip + "." + req, "required");
    TenantAdminToken t;
    t.name = nonEmpty(y["name"], ip + ".name");
    t.tenant = nonEmpty(y["tenant"], ip + ".tenant");
    bool known = false;
    for (const auto& tc : cfg.tenants) known = known || tc.name == t.tenant;
    if (!known) fail(y["tenant"], ip + ".tenant", "unknown tenant \"" + t.tenant + "\" (declare it under `tenants`)");
    const std::string hex = str(y["sha256"], ip + ".sha256");
    bool ok = hex.size() == 64;
    for (std::size_t j = 0; ok && j < 32; ++j) {
      const int hi = hexDigit(hex[2 * j]), lo = hexDigit(hex[2 * j + 1]);
      ok = hi >= 0 && lo >= 0;
      if (ok) t.sha256[j] = static_cast<unsigned char>(hi * 16 + lo);
    }
    if (!ok) fail(y["sha256"], ip + ".sha256", "expected the token's SHA-256 as 64 hex digits, not the token itself");
    cfg.admin.tenant_tokens.push_back(std::move(t));
  }
}

void Loader::loadStore(const YAML::Node& n, Config& cfg) {
  checkKeys(n, "store", {"type", "journal", "flush_interval", "redis", "lookups"});
  StoreConfig& s = cfg.store;
  if (auto v = n["type"]) {
    const std::string t = str(v, "store.type");
    if (t == "memory") s.type = StoreConfig::Type::Memory;
    else if (t == "redis") s.type = StoreConfig::Type::Redis;
    else fail(v, "store.type", "unknown store type \"" + t + "\" (memory | redis)");
  }
  if (auto v = n["journal"]) s.journal = nonEmpty(v, "store.journal");
  if (auto v = n["flush_interval"]) s.flush_interval = duration(v, "store.flush_interval", Millis(10));
  if (auto l = n["lookups"]) {
    checkKeys(l, "store.lookups", {"enabled", "expected_ids", "false_positive_rate", "negative_ttl"});
    if (auto v = l["enabled"]) s.lookups.enabled = boolean(v, "store.lookups.enabled");
    if (auto v = l["expected_ids"]) s.lookups.expected_ids = integer(v, "store.lookups.expected_ids", 1'000, 1'000'000'000);
    if (auto v = l["false_positive_rate"]) {
      s.lookups.false_positive_rate = number(v, "store.lookups.false_positive_rate", "a rate", 0.5);
      if (s.lookups.false_positive_rate < 1e-6) fail(v, "store.lookups.false_positive_rate", "at least 0.000001");
    }
    if (auto v = l["negative_ttl"]) s.lookups.negative_ttl = duration(v, "store.lookups.negative_ttl", Millis(0));
  }
  if (auto r = n["redis"]) {
    const std::string p = "store.redis";
    checkKeys(r, p, {"url", "username", "password_env", "command_timeout", "heartbeat", "replica_ttl", "resync", "sweep",
                     "require_persistence", "sentinel", "cluster"});
    auto addresses = [&](const YAML::Node& a, const YAML::Node& parent, const std::string& ap, std::vector<std::string>& out) {
      if (!a || !a.IsSequence() || a.size() == 0) fail(a ? a : parent, ap, "required: a list of host:port");
      for (std::size_t i = 0; i < a.size(); ++i) out.push_back(hostPort(a[i], ap + "[" + std::to_string(i) + "]"));
    };
    if (auto sn = r["sentinel"]) {
      checkKeys(sn, p + ".sentinel", {"addresses", "master", "username", "password_env"});
      addresses(sn["addresses"], sn, p + ".sentinel.addresses", s.redis.sentinels);
      if (!sn["master"]) fail(sn, p + ".sentinel.master", "required: the master's name the sentinels monitor");
      s.redis.sentinel_master = nonEmpty(sn["master"], p + ".sentinel.master");
      s.redis.sentinel_auth = redisCredentials(sn, p + ".sentinel", "", "no sentinel is asked for the master (limits are per replica)");
    }
    if (auto cl = r["cluster"]) {
      checkKeys(cl, p + ".cluster", {"nodes"});
      if (r["sentinel"]) fail(cl, p + ".cluster", "a Redis Cluster has no sentinels: set sentinel or cluster, not both");
      addresses(cl["nodes"], cl, p + ".cluster.nodes", s.redis.cluster_nodes);
    }
    if (auto v = r["url"]) {
      s.redis.url = nonEmpty(v, p + ".url");
      if (s.redis.url.rfind("redis://", 0) != 0 || s.redis.url.size() == 8)
        fail(v, p + ".url", "expected redis://[[user]:password@]host[:port][/db]");
      RedisEndpoint parsed;
      if (auto e = parseRedisUrl(s.redis.url, parsed)) fail(v, p + ".url", *e);
      if (!s.redis.cluster_nodes.empty() && parsed.db != 0)
        fail(v, p + ".url", "a Redis Cluster has only database 0: drop the /" + std::to_string(parsed.db));
    }
    s.redis.auth = redisCredentials(r, p, s.redis.url, "the store's Redis is not connected to (limits are per replica)");
    if (auto v = r["command_timeout"]) s.redis.command_timeout = duration(v, p + ".command_timeout", Millis(1));
    if (auto v = r["heartbeat"]) s.redis.heartbeat = duration(v, p + ".heartbeat", Millis(100));
    if (auto v = r["replica_ttl"]) s.redis.replica_ttl = duration(v, p + ".replica_ttl", Millis(200));
    if (auto v = r["resync"]) s.redis.resync = duration(v, p + ".resync", Millis(100));
    if (auto v = r["sweep"]) s.redis.sweep = duration(v, p + ".sweep", Millis(1'000));
    if (auto v = r["require_persistence"]) s.redis.require_persistence = boolean(v, p + ".require_persistence");
    if (s.redis.replica_ttl <= s.redis.heartbeat)
      fail(r["replica_ttl"] ? r["replica_ttl"] : r, p + ".replica_ttl", "must be longer than store.redis.heartbeat");
  }
  if (s.type == StoreConfig::Type::Redis && !s.journal.empty())
    fail(n["journal"], "store.journal", "only for type memory (Redis keeps the state itself)");
}

// "host:port" (IPv6 as "[::1]:53"), the port 1-65535.
std::string Loader::hostPort(const YAML::Node& n, const std::string& path) {
  std::string addr = nonEmpty(n, path);
  const auto colon = addr.rfind(':');
  int port = 0;
  if (colon != std::string::npos && colon + 1 < addr.size() && addr.size() - colon <= 6 &&
      addr.find_first_not_of("0123456789", colon + 1) == std::string::npos)
    port = std::stoi(addr.substr(colon + 1));
  if (colon == 0 || port < 1 || port > 65535) fail(n, path, "expected host:port (port 1-65535), e.g. 10.96.0.10:53 or [::1]:53");
  return addr;
}

void Loader::loadDiscovery(const YAML::Node& n, Config& cfg) {
  checkKeys(n, "discovery", {"resolvers", "timeout"});
  if (auto r = n["resolvers"]) {
    if (!r.IsSequence()) fail(r, "discovery.resolvers", "expected a list of host:port");
    for (std::size_t i = 0; i < r.size(); ++i)
      cfg.discovery.resolvers.push_back(hostPort(r[i], "discovery.resolvers[" + std::to_string(i) + "]"));
  }
  if (auto v = n["timeout"]) cfg.discovery.timeout = duration(v, "discovery.timeout", Millis(10));
}

void Loader::matchLists(const YAML::Node& m, const std::string& p, std::initializer_list<MatchField> fields) {
  std::vector<std::string_view> allowed;
  for (const auto& [field, out] : fields) allowed.push_back(field);
  checkKeys(m, p, std::span<const std::string_view>(allowed));
  for (const auto& [field, out] : fields) {
    const YAML::Node v = m[std::string(field)];
    if (!v) continue;
    const std::string fp = p + "." + std::string(field);
    if (v.IsSequence())
      for (std::size_t k = 0; k < v.size(); ++k) out->push_back(nonEmpty(v[k], fp + "[" + std::to_string(k) + "]"));
    else
      out->push_back(nonEmpty(v, fp));
  }
}

RateLimitPolicyConfig Loader::rateLimitPolicy(const YAML::Node& y, const std::string& p, const Config&) {
  checkKeys(y, p, {"name", "match", "per", "client_header", "rules", "requests_per_minute", "tokens_per_minute", "tokens_per_day",
                   "tokens_per_month", "usd_per_day", "usd_per_month", "end_streams_over_budget"});
  RateLimitPolicyConfig pol;
  if (auto v = y["end_streams_over_budget"]) pol.end_streams_over_budget = boolean(v, p + ".end_streams_over_budget");
  if (auto v = y["name"]) pol.name = nonEmpty(v, p + ".name");
  // Models are matched by the name the client asked for or the model a route chose, so a
  // route alias ("auto") is a valid name here.
  if (auto m = y["match"])
    matchLists(m, p + ".match", {{"model", &pol.models}, {"tenant", &pol.tenants}, {"key", &pol.keys}, {"route", &pol.routes}});
  if (auto v = y["per"]) {
    const std::string per = str(v, p + ".per");
    if (per == "key") pol.per = RateLimitPolicyConfig::Per::Key;
    else if (per == "tenant") pol.per = RateLimitPolicyConfig::Per::Tenant;
    else if (per == "all") pol.per = RateLimitPolicyConfig::Per::All;
    else fail(v, p + ".per", "expected key, tenant or all");
  }
  if (auto v = y["client_header"]) {
    pol.client_header = nonEmpty(v, p + ".client_header");
    for (auto& ch : pol.client_header) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  // The default limits are the policy's own limit keys.
  YAML::Node defaults;
  for (auto k : kLimitKeys)
    if (y[std::string(k)]) defaults[std::string(k)] = y[std::string(k)];
  if (defaults.size() > 0) pol.limits = limitSet(defaults, p);
  if (auto r = y["rules"]) {
    if (!r.IsSequence()) fail(r, p + ".rules", "expected a list of rules");
    for (std::size_t i = 0; i < r.size(); ++i) {
      const std::string rp = p + ".rules[" + std::to_string(i) + "]";
      const YAML::Node& ry = r[i];
      checkKeys(ry, rp, {"client_type", "rollout", "requests_per_minute", "tokens_per_minute", "tokens_per_day", "tokens_per_month",
                         "usd_per_day", "usd_per_month"});
      RateLimitRule rule;
      if (!ry["client_type"]) fail(ry, rp + ".client_type", "required: the value of " + pol.client_header + " this rule is for");
      rule.client_type = nonEmpty(ry["client_type"], rp + ".client_type");
      for (const auto& other : pol.rules)
        if (other.client_type == rule.client_type) fail(ry["client_type"], rp + ".client_type", "a rule for \"" + rule.client_type + "\" exists");
      YAML::Node limits;
      for (auto k : kLimitKeys)
        if (ry[std::string(k)]) limits[std::string(k)] = ry[std::string(k)];
      rule.limits = limitSet(limits, rp);
      if (!rule.limits.any()) fail(ry, rp, "a rule needs at least one limit");
      if (auto ro = ry["rollout"]) {
        checkKeys(ro, rp + ".rollout", {"percent", "hash_header"});
        if (!ro["percent"]) fail(ro, rp + ".rollout.percent", "required");
        rule.rollout_percent = percent(ro["percent"], rp + ".rollout.percent");
        if (auto h = ro["hash_header"]) {
          rule.rollout_header = nonEmpty(h, rp + ".rollout.hash_header");
          for (auto& ch : rule.rollout_header) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
      }
      pol.rules.push_back(std::move(rule));
    }
  }
  if (!pol.limits.any() && pol.rules.empty()) fail(y, p, "a policy needs limits or rules");
  return pol;
}

void Loader::loadIdempotency(const YAML::Node& n, Config& cfg) {
  const std::string p = "idempotency";
  checkKeys(n, p, {"enabled", "ttl", "lock_ttl", "max_body_bytes"});
  IdempotencyConfig& c = cfg.idempotency;
  if (auto v = n["enabled"]) c.enabled = boolean(v, p + ".enabled");
  if (auto v = n["ttl"]) c.ttl = duration(v, p + ".ttl", Millis(1'000));
  if (auto v = n["lock_ttl"]) c.lock_ttl = duration(v, p + ".lock_ttl", Millis(1'000));
  if (auto v = n["max_body_bytes"]) c.max_body_bytes = integer(v, p + ".max_body_bytes", 1024, 256ull << 20);
}

void Loader::loadResponses(const YAML::Node& n, Config& cfg) {
  const std::string p = "responses";
  checkKeys(n, p, {"store", "ttl", "max_bytes_per_tenant", "scope", "max_turns"});
  ResponsesConfig& c = cfg.responses;
  if (auto v = n["store"]) c.store = boolean(v, p + ".store");
  if (auto v = n["ttl"]) c.ttl = duration(v, p + ".ttl", Millis(1'000));
  if (auto v = n["max_bytes_per_tenant"]) c.max_bytes_per_tenant = integer(v, p + ".max_bytes_per_tenant", 1024, 1ull << 40);
  if (auto v = n["scope"]) {
    const std::string scope = str(v, p + ".scope");
    if (scope != "tenant" && scope != "key") fail(v, p + ".scope", "expected tenant or key");
    c.per_key = scope == "key";
  }
  if (auto v = n["max_turns"]) c.max_turns = integer(v, p + ".max_turns", 1, 10'000);
}

CachePolicy Loader::cachePolicy(const YAML::Node& n, const std::string& p, const CachePolicy& base,
                                std::initializer_list<std::string_view> more) {
  std::vector<std::string_view> keys{"enabled", "ttl", "max_entry_bytes", "cacheable", "stale_if_error", "semantic"};
  keys.insert(keys.end(), more.begin(), more.end());
  checkKeys(n, p, std::span<const std::string_view>(keys));
  CachePolicy c = base;
  if (auto v = n["enabled"]) c.enabled = boolean(v, p + ".enabled");
  if (auto v = n["ttl"]) c.ttl = duration(v, p + ".ttl", Millis(1'000));
  if (auto v = n["max_entry_bytes"]) c.max_entry_bytes = integer(v, p + ".max_entry_bytes", 1024, 64ull << 20);
  if (auto v = n["stale_if_error"]) c.stale_if_error = duration(v, p + ".stale_if_error");
  if (auto sem = n["semantic"]) {
    const std::string sp = p + ".semantic";
    if (more.size() > 0) checkKeys(sem, sp, {"enabled", "embedding_model", "threshold", "max_entries", "max_entries_per_tenant", "timeout"});
    else checkKeys(sem, sp, {"enabled", "embedding_model", "threshold"});
    if (auto v = sem["enabled"]) c.semantic = boolean(v, sp + ".enabled");
    if (auto v = sem["embedding_model"]) c.embedding_model = nonEmpty(v, sp + ".embedding_model");
    if (auto v = sem["threshold"]) {
      c.threshold = number(v, sp + ".threshold", "a similarity", 1.0);
      if (c.threshold <= 0) fail(v, sp + ".threshold", "a similarity above 0 (up to 1)");
    }
    if (c.semantic && c.embedding_model.empty()) fail(sem, sp + ".embedding_model", "required: the model that embeds the messages");
  }
  if (auto v = n["cacheable"]) {
    const std::string w = str(v, p + ".cacheable");
    if (w != "zero_temperature" && w != "all") fail(v, p + ".cacheable", "expected zero_temperature or all");
    c.all_requests = w == "all";
  }
  return c;
}

void Loader::loadCache(const YAML::Node& n, Config& cfg) {
  const std::string p = "cache";
  CacheConfig& c = cfg.cache;
  c.defaults = cachePolicy(n, p, c.defaults, {"max_bytes", "scope", "key_user", "hit_tokens", "redis", "local_ttl"});
  if (auto v = n["max_bytes"]) c.max_bytes = integer(v, p + ".max_bytes", 1 << 20, 1ull << 40);
  if (auto v = n["scope"]) {
    const std::string scope = str(v, p + ".scope");
    if (scope != "tenant" && scope != "key") fail(v, p + ".scope", "expected tenant or key");
    c.per_key = scope == "key";
  }
  if (auto v = n["key_user"]) c.key_user = boolean(v, p + ".key_user");
  if (auto v = n["hit_tokens"]) {
    const std::string w = str(v, p + ".hit_tokens");
    if (w != "zero" && w != "tokens") fail(v, p + ".hit_tokens", "expected zero or tokens");
    c.hit_tokens = w == "tokens";
  }
  if (auto r = n["redis"]) {
    checkKeys(r, p + ".redis", {"url", "timeout"});
    if (auto v = r["url"]) c.redis_url = nonEmpty(v, p + ".redis.url");
    if (auto v = r["timeout"]) c.redis_timeout = duration(v, p + ".redis.timeout", Millis(1));
  }
  if (auto v = n["local_ttl"]) c.local_ttl = duration(v, p + ".local_ttl");
  if (auto sem = n["semantic"]) {
    if (auto v = sem["max_entries"]) c.semantic_max_entries = integer(v, p + ".semantic.max_entries", 1, 10'000'000);
    if (auto v = sem["max_entries_per_tenant"])
      c.semantic_max_entries_per_tenant = integer(v, p + ".semantic.max_entries_per_tenant", 1, 10'000'000);
    if (auto v = sem["timeout"]) c.embedding_timeout = duration(v, p + ".semantic.timeout", Millis(1));
  }
}

void Loader::checkCacheModels(const YAML::Node& root, Config& cfg) {
  for (std::size_t i = 0; i < cfg.models.size(); ++i) {
    const CachePolicy& c = cfg.models[i].cache;
    if (!c.enabled || !c.semantic) continue;
    const YAML::Node at = root["models"] && root["models"][i]["cache"] ? root["models"][i]["cache"] : root["cache"];
    const std::string p = root["models"] && root["models"][i]["cache"] ? "models[" + std::to_string(i) + "].cache.semantic.embedding_model"
                                                                          : "cache.semantic.embedding_model";
    if (const std::string why = embeddingModelProblem(cfg, c.embedding_model); !why.empty()) fail(at, p, why);
  }
}

void Loader::loadRateLimits(const YAML::Node& n, Config& cfg) {
  checkKeys(n, "rate_limits", {"default_max_tokens", "models", "policies", "end_streams_over_budget"});
  if (auto v = n["end_streams_over_budget"]) cfg.rate_limits.end_streams_over_budget = boolean(v, "rate_limits.end_streams_over_budget");
  if (auto ps = n["policies"]) {
    if (!ps.IsSequence()) fail(ps, "rate_limits.policies", "expected a list of policies");
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const std::string p = "rate_limits.policies[" + std::to_string(i) + "]";
      RateLimitPolicyConfig pol = rateLimitPolicy(ps[i], p, cfg);
      if (pol.name.empty()) pol.name = "policy-" + std::to_string(i);
      for (const auto& other : cfg.rate_limits.policies)
        if (other.name == pol.name) fail(ps[i]["name"] ? ps[i]["name"] : ps[i], p + ".name", "duplicate policy \"" + pol.name + "\"");
      cfg.rate_limits.policies.push_back(std::move(pol));
    }
  }
  if (auto v = n["default_max_tokens"])
    cfg.rate_limits.default_max_tokens = static_cast<std::int64_t>(integer(v, "rate_limits.default_max_tokens", 0, 10'000'000));
  if (auto m = n["models"]) {
    if (!m.IsMap()) fail(m, "rate_limits.models", "expected a mapping of model name to limits");
    for (const auto& kv : m) {
      const std::string model = str(kv.first, "rate_limits.models");
      const std::string mp = "rate_limits.models." + model;
      if (!cfg.findModel(model)) fail(kv.first, mp, "unknown model \"" + model + "\"");
      cfg.rate_limits.models.emplace_back(model, limitSet(kv.second, mp));
    }
  }
}

}  // namespace tahua::config_detail
