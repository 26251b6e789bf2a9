// The exact response cache's storage: an in-process LRU bounded in bytes (one per
// replica, shared by its workers, in shards with a lock each) in front of an optional
// Redis of its own (cache.redis.url: shared by the replicas, evicting by its own
// maxmemory policy, entries with the Redis TTL). The filter that decides what is cached
// and answers hits is src/filters/cache/.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/semantic_index.h"
#include "core/duration.h"
#include "core/usage.h"

namespace boost::asio {
class io_context;
}

namespace tahua {

// One kept answer, as the client got it (its API's bytes), and what a hit needs to
// answer it in the other form (stream or not) and to count it.
struct CachedAnswer {
  std::uint8_t endpoint = 0;    // the Endpoint it answered
  bool streamed = false;        // body is an event stream
  bool include_usage = false;   // OpenAI chat: the stream carried a usage chunk
  int status = 200;
  std::string content_type;
  std::string body;
  Usage usage;                  // as the upstream reported it (tokens a hit saves)
  // For purge and stats (never part of the key).
  std::string tenant, key, model;
  std::int64_t fresh_until_ms = 0;  // unix ms: a hit until then
  std::int64_t expires_ms = 0;      // unix ms: kept until then (later only with stale_if_error)

  std::size_t bytes() const { return body.size() + content_type.size() + tenant.size() + key.size() + model.size() + 96; }
  // The form kept in Redis: a JSON header line, then the body.
  std::string serialize() const;
  static std::optional<CachedAnswer> parse(std::string_view text);
};

class ResponseCache {
 public:
  using Clock = std::function<std::int64_t()>;  // unix ms (tests pass a fake one)
  ResponseCache(std::size_t max_bytes, Clock clock);
  ~ResponseCache();
  std::int64_t now() const { return clock_(); }
  // The semantic layer's vectors (bounds set at start: configureSemantic).
  SemanticIndex& semantic() { return *semantic_; }
  void configureSemantic(std::size_t max_entries, std::size_t max_per_index);

  // --- The in-process layer (any thread) ---
  std::shared_ptr<const CachedAnswer> get(std::string_view key);
  void put(const std::string& key, std::shared_ptr<const CachedAnswer> answer);
  // Entries whose tenant / key / model match every non-empty filter go. Returns how many.
  std::size_t purge(std::string_view tenant, std::string_view key, std::string_view model);

  // Requests' outcomes since start (every worker), for the admin API's hit rate.
  void countLookup(bool hit, bool semantic_hit, bool miss) {
    if (hit) hits_.fetch_add(1, std::memory_order_relaxed);
    if (semantic_hit) semantic_hits_.fetch_add(1, std::memory_order_relaxed);
    if (miss) misses_.fetch_add(1, std::memory_order_relaxed);
  }
  struct Stats {
    std::uint64_t entries = 0, bytes = 0, evictions = 0, expired = 0, purged = 0;
    std::uint64_t hits = 0, semantic_hits = 0, misses = 0;
  };
  Stats stats() const;

  // --- The shared layer (Redis), on the calling worker's thread ---
  // Before the workers serve: where (validated: an error text, or none).
  std::optional<std::string> configureRedis(const std::string& url, Millis timeout);
  bool shared() const { return !redis_url_.empty(); }
  // On each worker's thread, before it serves: its own connection.
  void attach(boost::asio::io_context& io);
  // found: the entry; nullopt: a miss or Redis unavailable (`unavailable` says which).
  void remoteGet(const std::string& key, std::function<void(std::shared_ptr<const CachedAnswer>, bool unavailable)> done);
  void remotePut(const std::string& key, const CachedAnswer& answer, Millis ttl);
  // SCAN + DEL of the keys matching `pattern` (a glob); `done(count or -1)`.
  void remotePurge(const std::string& pattern, std::function<void(long long)> done);

 private:
  struct Node {
    std::string key;
    std::shared_ptr<const CachedAnswer> answer;
    std::size_t bytes = 0;
  };
  struct Shard {
    mutable std::mutex mu;
    std::list<Node> lru;  // most recent first
    std::unordered_map<std::string_view, std::list<Node>::iterator> index;  // views into the nodes' keys
    std::size_t bytes = 0;
  };
  static constexpr std::size_t kShards = 16;
  Shard& shardOf(std::string_view key);
  void dropLocked(Shard& s, std::list<Node>::iterator it);

  std::size_t shard_bytes_;
  Clock clock_;
  std::array<Shard, kShards> shards_;
  std::atomic<std::uint64_t> evictions_{0}, expired_{0}, purged_{0};
  std::atomic<std::uint64_t> hits_{0}, semantic_hits_{0}, misses_{0};
  std::string redis_url_;
  Millis redis_timeout_{200};
  std::unique_ptr<SemanticIndex> semantic_;
};

}  // namespace tahua
