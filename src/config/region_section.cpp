// region: this fleet's region name and the peer regions' stores (docs/regions.md).
#include <set>

#include "config/loader_detail.h"
#include "core/redis_url.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kRegionFields[] = {
    nonEmpty("name", "",
             "This region's name: a DNS label of at most 32 (it goes into Redis values, records and metric labels).")
        .needed()
        .atRestart(),
    list("peers", "", "Every other region's store, reached from here (at least one).").needed().atRestart(),
    duration("interval", 50, "500ms", "How often the link pushes to the peers: the lag's bound.").atRestart(),
    duration("timeout", 10, "1s", "Connect and each command to a peer; one that does not answer is skipped until the "
                                  "next cycle.")
        .atRestart(),
};
const Table kRegion("region",
                    "Several regions, each with its own Redis (store.type redis, a standalone url): tenants, keys, "
                    "resources and quota use are copied between them in the background (docs/regions.md).",
                    kRegionFields);

constexpr Field kPeerFields[] = {
    nonEmpty("name", "", "The peer region's name (a DNS label of at most 32), unique.").needed().atRestart(),
    nonEmpty("url", "", "The peer region's store, `redis://host:port` (a password may be in it).").needed().atRestart(),
    nonEmpty("username", "", "An ACL user of that Redis (with password_env).").atRestart(),
    nonEmpty("password_env", "",
             "The variable holding its password, read at start; unset: a warning, and nothing is pushed to that region.")
        .atRestart(),
};
const Table kPeer("region.peers[]", "Another region's store.", kPeerFields);

}  // namespace

void Loader::loadRegion(const YAML::Node& n, Config& cfg) {
  const std::string p = "region";
  if (!n.IsMap()) fail(n, p, "expected {name, peers, interval, timeout}");
  Fields f(*this, n, p, kRegion);
  RegionConfig& r = cfg.region;
  if (!n["name"]) fail(n, p + ".name", "required: this region's name");
  f.read("name", r.name);
  // Region names go into Redis values and metric labels: short and plain.
  if (!dnsLabel(r.name, 32)) fail(n["name"], p + ".name", "a DNS label of at most 32: lower-case letters, digits, '-' inside");
  // The link works on the store's Redis: records, quota counters and its own keys.
  if (cfg.store.type != StoreConfig::Type::Redis)
    fail(n, p, "needs store.type redis (each region has its own Redis)");
  if (!cfg.store.redis.sentinels.empty() || !cfg.store.redis.cluster_nodes.empty())
    fail(n, p, "needs a standalone store.redis.url (Sentinel and Cluster are not supported with regions yet)");
  const YAML::Node peers = f["peers"];
  if (!peers || !peers.IsSequence() || peers.size() == 0) fail(peers ? peers : n, p + ".peers", "required: a list of {name, url}");
  std::set<std::string> names{r.name};
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const std::string pp = p + ".peers[" + std::to_string(i) + "]";
    Fields pf(*this, peers[i], pp, kPeer);
    RegionPeerConfig peer;
    pf.read("name", peer.name);
    if (!dnsLabel(peer.name, 32)) fail(peers[i]["name"], pp + ".name", "a DNS label of at most 32: lower-case letters, digits, '-' inside");
    if (!names.insert(peer.name).second) fail(peers[i]["name"], pp + ".name", "\"" + peer.name + "\" is this region or another peer");
    if (!peers[i]["url"]) fail(peers[i], pp + ".url", "required: the peer region's store, redis://host:port");
    pf.read("url", peer.url);
    RedisEndpoint parsed;
    if (auto e = parseRedisUrl(peer.url, parsed)) fail(peers[i]["url"], pp + ".url", *e);
    peer.auth = redisCredentials(peers[i], pp, peer.url, "nothing is pushed to that region");
    r.peers.push_back(std::move(peer));
  }
  f.read("interval", r.interval);
  f.read("timeout", r.timeout);
}

}  // namespace tahua::config_detail
