// Shared state: `store` (in process with its journal, or Redis: standalone, Sentinel or
// Cluster) and `region` (this fleet's region and the peer regions' stores). Loaded by
// loadStore (store_section.cpp) and region_section.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/duration.h"
#include "core/redis_url.h"

namespace tahua {

// Where shared state lives. In process (the default; one replica): counters in memory,
// and what cannot be rebuilt (admin-created tenants and keys, quota consumption) in
// `journal`, a file read back at start.
//
// Redis (type: redis; many replicas): every replica shares the counters and records.
// When Redis does not answer within `command_timeout`, each replica limits on its own
// with the shared limits divided by the replicas seen alive (heartbeats), until it is
// back.
struct RedisStoreConfig {
  std::string url = "redis://127.0.0.1:6379";  // redis://[[user]:password@]host[:port][/db]
  // username, password_env: the password from the environment instead of the url (the
  // url then has none); used for every node of a cluster and the master Sentinel names.
  RedisCredentials auth;
  Millis command_timeout{200};
  Millis heartbeat{2'000};   // a replica announces itself this often ...
  Millis replica_ttl{6'000};  // ... and counts as alive this long after
  Millis resync{30'000};      // full reload of the records (besides change notifications)
  Millis sweep{60'000};       // one replica removes expired registrations and stale node reports this often
  // Refuse to start unless the server persists (AOF or RDB) and never evicts (the
  // records and quotas cannot be rebuilt). Off only for a throwaway Redis.
  bool require_persistence = true;
  // Sentinel: the master is the one these sentinels name `sentinel_master` (the url's
  // host and port are then not used; its password and database are).
  std::vector<std::string> sentinels;  // host:port
  std::string sentinel_master;
  RedisCredentials sentinel_auth;  // the sentinels' own (Sentinel's requirepass / ACL user)
  // Redis Cluster: these nodes (host:port) are asked for the slot map; the url's
  // password and user are used for every node, its host and port are not.
  std::vector<std::string> cluster_nodes;
};

// Several regions (config `region`, docs/regions.md): this fleet is region `name` with
// its own Redis (store.redis.url); one replica of it pushes, every `interval`, the
// tenants, keys and resources that are newer here (last writer wins by a hybrid logical
// clock) and this region's quota use to each peer's Redis. Requests never wait on a peer.
struct RegionPeerConfig {
  std::string name;
  std::string url;  // redis://... of the peer region's store
  RedisCredentials auth;  // username, password_env for it
  bool operator==(const RegionPeerConfig&) const = default;
};
struct RegionConfig {
  std::string name;  // empty: one region (the section is absent)
  std::vector<RegionPeerConfig> peers;
  Millis interval{500};
  Millis timeout{1'000};  // connect and each command to a peer
  bool operator==(const RegionConfig&) const = default;
};

// The filter in front of on-demand lookups of a shared store (store/id_filter.h).
struct LookupFilterConfig {
  bool enabled = true;
  std::uint64_t expected_ids = 1'000'000;  // sizes the Bloom filter (1 M at 1%: 1.2 MB)
  double false_positive_rate = 0.01;
  Millis negative_ttl{60'000};             // how long a miss is remembered (0: not at all)
};

struct StoreConfig {
  enum class Type { Memory, Redis };
  Type type = Type::Memory;
  LookupFilterConfig lookups;   // redis
  std::string journal;          // memory: empty = nothing survives a restart (warned about)
  Millis flush_interval{1'000};  // memory: how often quota consumption is appended to the journal
  RedisStoreConfig redis;
};

}  // namespace tahua
