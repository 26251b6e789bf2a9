// region: this fleet's region name and the peer regions' stores (docs/regions.md).
#include <set>

#include "config/loader_detail.h"
#include "core/redis_url.h"

namespace tahua::config_detail {

void Loader::loadRegion(const YAML::Node& n, Config& cfg) {
  const std::string p = "region";
  if (!n.IsMap()) fail(n, p, "expected {name, peers, interval, timeout}");
  checkKeys(n, p, {"name", "peers", "interval", "timeout"});
  RegionConfig& r = cfg.region;
  if (!n["name"]) fail(n, p + ".name", "required: this region's name");
  r.name = nonEmpty(n["name"], p + ".name");
  // Region names go into Redis values and metric labels: short and plain.
  if (!dnsLabel(r.name, 32)) fail(n["name"], p + ".name", "a DNS label of at most 32: lower-case letters, digits, '-' inside");
  // The link works on the store's Redis: records, quota counters and its own keys.
  if (cfg.store.type != StoreConfig::Type::Redis)
    fail(n, p, "needs store.type redis (each region has its own Redis)");
  if (!cfg.store.redis.sentinels.empty() || !cfg.store.redis.cluster_nodes.empty())
    fail(n, p, "needs a standalone store.redis.url (Sentinel and Cluster are not supported with regions yet)");
  const YAML::Node peers = n["peers"];
  if (!peers || !peers.IsSequence() || peers.size() == 0) fail(peers ? peers : n, p + ".peers", "required: a list of {name, url}");
  std::set<std::string> names{r.name};
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const std::string pp = p + ".peers[" + std::to_string(i) + "]";
    checkKeys(peers[i], pp, {"name", "url", "username", "password_env"});
    RegionPeerConfig peer;
    if (!peers[i]["name"]) fail(peers[i], pp + ".name", "required");
    peer.name = nonEmpty(peers[i]["name"], pp + ".name");
    if (!dnsLabel(peer.name, 32)) fail(peers[i]["name"], pp + ".name", "a DNS label of at most 32: lower-case letters, digits, '-' inside");
    if (!names.insert(peer.name).second) fail(peers[i]["name"], pp + ".name", "\"" + peer.name + "\" is this region or another peer");
    if (!peers[i]["url"]) fail(peers[i], pp + ".url", "required: the peer region's store, redis://host:port");
    peer.url = nonEmpty(peers[i]["url"], pp + ".url");
    RedisEndpoint parsed;
    if (auto e = parseRedisUrl(peer.url, parsed)) fail(peers[i]["url"], pp + ".url", *e);
    peer.auth = redisCredentials(peers[i], pp, peer.url, "nothing is pushed to that region");
    r.peers.push_back(std::move(peer));
  }
  if (auto v = n["interval"]) r.interval = duration(v, p + ".interval", Millis(50));
  if (auto v = n["timeout"]) r.timeout = duration(v, p + ".timeout", Millis(10));
}

}  // namespace tahua::config_detail
