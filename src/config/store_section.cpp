// Where shared state lives (`store`: in process, or Redis standalone, with Sentinel or a
// Cluster) and the DNS servers upstreams are discovered with (`discovery`).
#include "config/loader_detail.h"
#include "core/redis_url.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

// Sockets and the store's threads are set up once: a reload warns about a changed store.
constexpr Field kStoreFields[] = {
    choice("type", "memory | redis", "memory",
           "memory: counters in this process (one replica); redis: shared by every replica.")
        .atRestart(),
    nonEmpty("journal", "",
             "memory: the file admin-created tenants and keys, quota use and idempotency answers are kept in, read "
             "back at start; absent: nothing survives a restart (warned).")
        .atRestart(),
    duration("flush_interval", 10, "1s", "memory: quota use is appended to the journal this often.").atRestart(),
    section("redis", "type redis: the server, its credentials, and how replicas share it.").atRestart(),
    section("lookups", "redis (not a cluster): the filter in front of on-demand lookups of ids.").atRestart(),
};
const Table kStore("store", "Where shared state lives (docs/tenants-and-limits.md); a change needs a restart.", kStoreFields);

constexpr Field kLookupsFields[] = {
    boolean("enabled", "true", "A Bloom filter and a cache of misses answer lookups of ids that do not exist.").atRestart(),
    integer("expected_ids", 1'000, 1'000'000'000, "1000000",
            "Sizes the filter: 1 M ids at 1% is 1.2 MB (10 M: 12 MB). More ids: every lookup asks Redis (warned).")
        .atRestart(),
    number("false_positive_rate", 0.5, "0.01", "The filter's share of false positives (at least 0.000001).", "a rate")
        .atRestart(),
    duration("negative_ttl", 0, "60s",
             "A miss is remembered this long (0s: not at all); a write through any replica forgets it.")
        .atRestart(),
};
const Table kLookups("store.lookups", "Lookups of ids that do not exist, answered without a round trip.", kLookupsFields);

constexpr Field kStoreRedisFields[] = {
    nonEmpty("url", "redis://127.0.0.1:6379",
             "redis://[[user]:password@]host[:port][/db]. With sentinel or cluster, its host and port are not used.")
        .atRestart(),
    kRedisUsernameField.atRestart(),
    kRedisPasswordEnvField.atRestart(),
    duration("command_timeout", 1, "200ms",
             "Past it (or with Redis down) each replica decides locally, every limit divided by the replicas alive.")
        .atRestart(),
    duration("heartbeat", 100, "2s", "A replica announces itself this often ...").atRestart(),
    duration("replica_ttl", 200, "6s", "... and counts as alive this long after; longer than heartbeat.").atRestart(),
    duration("resync", 100, "30s", "A full reload of tenants, keys and resources, besides change notifications.").atRestart(),
    duration("sweep", 1'000, "60s", "One replica removes expired registrations and stale node reports this often.").atRestart(),
    boolean("require_persistence", "true",
            "Refuse to start unless the server persists (AOF or RDB) and never evicts (noeviction); off only for a "
            "throwaway Redis.")
        .atRestart(),
    section("sentinel", "The master is the one these sentinels name (followed through a failover).").atRestart(),
    section("cluster", "A Redis Cluster, instead of sentinel: each command goes to its slot's master.").atRestart(),
};
const Table kStoreRedis("store.redis", "The Redis of `type: redis`.", kStoreRedisFields);

constexpr Field kSentinelFields[] = {
    list("addresses", "", "The sentinels' host:port, asked in turn.").needed().atRestart(),
    nonEmpty("master", "", "The master's name the sentinels monitor.").needed().atRestart(),
    kRedisUsernameField.atRestart(),
    kRedisPasswordEnvField.atRestart(),
};
const Table kSentinel("store.redis.sentinel",
                      "Redis Sentinel; username and password_env are the sentinels' own (the url's password and database "
                      "are the master's).",
                      kSentinelFields);

constexpr Field kClusterFields[] = {
    list("nodes", "", "host:port of nodes asked for the slot map; the url gives only the password (database 0).")
        .needed()
        .atRestart(),
};
const Table kCluster("store.redis.cluster", "A Redis Cluster.", kClusterFields);

constexpr Field kDiscoveryFields[] = {
    list("resolvers", "[]", "DNS servers as host:port (IPv6 as [::1]:53); empty: the system's (/etc/resolv.conf)."),
    duration("timeout", 10, "2s", "Per query try (two tries)."),
};
const Table kDiscovery("discovery", "The DNS client that resolves deployments' `dns` names into endpoints.", kDiscoveryFields);

}  // namespace

void Loader::loadStore(const YAML::Node& n, Config& cfg) {
  Fields f(*this, n, "store", kStore);
  StoreConfig& s = cfg.store;
  if (auto v = f["type"]) {
    const std::string t = str(v, "store.type");
    if (t == "memory") s.type = StoreConfig::Type::Memory;
    else if (t == "redis") s.type = StoreConfig::Type::Redis;
    else fail(v, "store.type", "unknown store type \"" + t + "\" (memory | redis)");
  }
  f.read("journal", s.journal);
  f.read("flush_interval", s.flush_interval);
  if (auto l = f["lookups"]) {
    Fields lf(*this, l, "store.lookups", kLookups);
    lf.read("enabled", s.lookups.enabled);
    lf.read("expected_ids", s.lookups.expected_ids);
    if (lf.read("false_positive_rate", s.lookups.false_positive_rate) && s.lookups.false_positive_rate < 1e-6)
      fail(lf["false_positive_rate"], "store.lookups.false_positive_rate", "at least 0.000001");
    lf.read("negative_ttl", s.lookups.negative_ttl);
  }
  if (auto r = f["redis"]) {
    const std::string p = "store.redis";
    Fields rf(*this, r, p, kStoreRedis);
    auto addresses = [&](const YAML::Node& a, const YAML::Node& parent, const std::string& ap, std::vector<std::string>& out) {
      if (!a || !a.IsSequence() || a.size() == 0) fail(a ? a : parent, ap, "required: a list of host:port");
      for (std::size_t i = 0; i < a.size(); ++i) out.push_back(hostPort(a[i], ap + "[" + std::to_string(i) + "]"));
    };
    if (auto sn = rf["sentinel"]) {
      Fields sf(*this, sn, p + ".sentinel", kSentinel);
      addresses(sf["addresses"], sn, sf.at("addresses"), s.redis.sentinels);
      if (!sf["master"]) fail(sn, sf.at("master"), "required: the master's name the sentinels monitor");
      sf.read("master", s.redis.sentinel_master);
      s.redis.sentinel_auth = redisCredentials(sn, p + ".sentinel", "", "no sentinel is asked for the master (limits are per replica)");
    }
    if (auto cl = rf["cluster"]) {
      Fields cf(*this, cl, p + ".cluster", kCluster);
      if (rf["sentinel"]) fail(cl, p + ".cluster", "a Redis Cluster has no sentinels: set sentinel or cluster, not both");
      addresses(cf["nodes"], cl, cf.at("nodes"), s.redis.cluster_nodes);
    }
    if (rf.read("url", s.redis.url)) {
      const YAML::Node v = rf["url"];
      if (s.redis.url.rfind("redis://", 0) != 0 || s.redis.url.size() == 8)
        fail(v, p + ".url", "expected redis://[[user]:password@]host[:port][/db]");
      RedisEndpoint parsed;
      if (auto e = parseRedisUrl(s.redis.url, parsed)) fail(v, p + ".url", *e);
      if (!s.redis.cluster_nodes.empty() && parsed.db != 0)
        fail(v, p + ".url", "a Redis Cluster has only database 0: drop the /" + std::to_string(parsed.db));
    }
    s.redis.auth = redisCredentials(r, p, s.redis.url, "the store's Redis is not connected to (limits are per replica)");
    rf.read("command_timeout", s.redis.command_timeout);
    rf.read("heartbeat", s.redis.heartbeat);
    rf.read("replica_ttl", s.redis.replica_ttl);
    rf.read("resync", s.redis.resync);
    rf.read("sweep", s.redis.sweep);
    rf.read("require_persistence", s.redis.require_persistence);
    if (s.redis.replica_ttl <= s.redis.heartbeat)
      fail(rf["replica_ttl"] ? rf["replica_ttl"] : r, p + ".replica_ttl", "must be longer than store.redis.heartbeat");
  }
  if (s.type == StoreConfig::Type::Redis && !s.journal.empty())
    fail(f["journal"], "store.journal", "only for type memory (Redis keeps the state itself)");
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
  Fields f(*this, n, "discovery", kDiscovery);
  if (auto r = f["resolvers"]) {
    if (!r.IsSequence()) fail(r, "discovery.resolvers", "expected a list of host:port");
    for (std::size_t i = 0; i < r.size(); ++i)
      cfg.discovery.resolvers.push_back(hostPort(r[i], "discovery.resolvers[" + std::to_string(i) + "]"));
  }
  f.read("timeout", cfg.discovery.timeout);
}

}  // namespace tahua::config_detail
