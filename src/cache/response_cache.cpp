#include "cache/response_cache.h"

#include <boost/json.hpp>

#include <functional>

#include "store/redis/redis_client.h"
#include "core/redis_url.h"

namespace tahua {
namespace bj = boost::json;
namespace {

std::shared_ptr<RedisClient>& workerConnection() {
  thread_local std::shared_ptr<RedisClient> conn;
  return conn;
}

}  // namespace

ResponseCache::ResponseCache(std::size_t max_bytes, Clock clock)
    : shard_bytes_(std::max<std::size_t>(max_bytes / kShards, 1)),
      clock_(std::move(clock)),
      semantic_(std::make_unique<SemanticIndex>(20'000, 2'000, clock_)) {}

void ResponseCache::configureSemantic(std::size_t max_entries, std::size_t max_per_index) {
  semantic_ = std::make_unique<SemanticIndex>(max_entries, max_per_index, clock_);
}

ResponseCache::~ResponseCache() = default;

ResponseCache::Shard& ResponseCache::shardOf(std::string_view key) {
  // Keys are hex digests (uniform): their last characters pick the shard.
  return shards_[std::hash<std::string_view>{}(key) % kShards];
}

void ResponseCache::dropLocked(Shard& s, std::list<Node>::iterator it) {
  s.bytes -= std::min(s.bytes, it->bytes);
  s.index.erase(std::string_view(it->key));
  s.lru.erase(it);
}

std::shared_ptr<const CachedAnswer> ResponseCache::get(std::string_view key) {
  Shard& s = shardOf(key);
  std::lock_guard lock(s.mu);
  auto f = s.index.find(key);
  if (f == s.index.end()) return nullptr;
  auto it = f->second;
  if (it->answer->expires_ms <= clock_()) {
    dropLocked(s, it);
    expired_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  s.lru.splice(s.lru.begin(), s.lru, it);  // most recent first
  return it->answer;
}

void ResponseCache::put(const std::string& key, std::shared_ptr<const CachedAnswer> answer) {
  const std::size_t bytes = answer->bytes() + key.size();
  if (bytes > shard_bytes_) return;  // larger than a shard: never kept
  Shard& s = shardOf(key);
  std::lock_guard lock(s.mu);
  if (auto f = s.index.find(key); f != s.index.end()) dropLocked(s, f->second);
  s.lru.push_front(Node{key, std::move(answer), bytes});
  s.index.emplace(std::string_view(s.lru.front().key), s.lru.begin());
  s.bytes += bytes;
  while (s.bytes > shard_bytes_ && !s.lru.empty()) {
    dropLocked(s, std::prev(s.lru.end()));
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
}

std::size_t ResponseCache::purge(std::string_view tenant, std::string_view key, std::string_view model) {
  std::size_t n = 0;
  for (Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    for (auto it = s.lru.begin(); it != s.lru.end();) {
      const CachedAnswer& a = *it->answer;
      const bool match = (tenant.empty() || a.tenant == tenant) && (key.empty() || a.key == key) && (model.empty() || a.model == model);
      auto next = std::next(it);
      if (match) {
        dropLocked(s, it);
        ++n;
      }
      it = next;
    }
  }
  purged_.fetch_add(n, std::memory_order_relaxed);
  return n;
}

ResponseCache::Stats ResponseCache::stats() const {
  Stats st;
  for (const Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    st.entries += s.lru.size();
    st.bytes += s.bytes;
  }
  st.evictions = evictions_.load(std::memory_order_relaxed);
  st.expired = expired_.load(std::memory_order_relaxed);
  st.purged = purged_.load(std::memory_order_relaxed);
  st.hits = hits_.load(std::memory_order_relaxed);
  st.semantic_hits = semantic_hits_.load(std::memory_order_relaxed);
  st.misses = misses_.load(std::memory_order_relaxed);
  return st;
}

std::optional<std::string> ResponseCache::configureRedis(const std::string& url, Millis timeout) {
  RedisEndpoint endpoint;
  if (auto err = parseRedisUrl(url, endpoint)) return "cache.redis.url: " + *err;
  redis_url_ = url;
  redis_timeout_ = timeout;
  return std::nullopt;
}

void ResponseCache::attach(boost::asio::io_context& io) {
  if (redis_url_.empty()) return;
  RedisEndpoint endpoint;
  parseRedisUrl(redis_url_, endpoint);
  workerConnection() = std::make_shared<RedisClient>(std::make_shared<RedisConnection>(io, endpoint, redis_timeout_));
}

void ResponseCache::remoteGet(const std::string& key, std::function<void(std::shared_ptr<const CachedAnswer>, bool)> done) {
  RedisClient* conn = workerConnection().get();
  if (!conn || !conn->usable()) {
    done(nullptr, true);
    return;
  }
  conn->send({"GET", key}, [done = std::move(done), clock = clock_](std::optional<RedisReply> r) {
    if (!r || r->isError()) return done(nullptr, true);
    if (r->type != RedisReply::Type::String) return done(nullptr, false);
    auto a = CachedAnswer::parse(r->str);
    if (!a || a->expires_ms <= clock()) return done(nullptr, false);
    done(std::make_shared<const CachedAnswer>(std::move(*a)), false);
  });
}

void ResponseCache::remotePut(const std::string& key, const CachedAnswer& answer, Millis ttl) {
  RedisClient* conn = workerConnection().get();
  if (!conn || !conn->usable()) return;  // a cache: an entry not kept is a later miss
  conn->send({"SET", key, answer.serialize(), "PX", std::to_string(ttl.count())}, [](std::optional<RedisReply>) {});
}

void ResponseCache::remotePurge(const std::string& pattern, std::function<void(long long)> done) {
  std::shared_ptr<RedisClient> conn = workerConnection();
  if (!conn || !conn->usable()) {
    done(-1);
    return;
  }
  // One SCAN page at a time, its keys deleted, until the cursor comes back to 0.
  struct Scan : std::enable_shared_from_this<Scan> {
    std::shared_ptr<RedisClient> conn;
    std::string pattern;
    std::function<void(long long)> done;
    long long count = 0;
    void next(const std::string& cursor) {
      auto self = shared_from_this();
      conn->send({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, [self](std::optional<RedisReply> r) {
        if (!r || r->type != RedisReply::Type::Array || r->elements.size() != 2) return self->done(-1);
        const std::string cursor = r->elements[0].str;
        std::vector<std::string> del{"DEL"};
        for (const auto& k : r->elements[1].elements) del.push_back(k.str);
        auto go_on = [self, cursor] {
          if (cursor == "0") self->done(self->count);
          else self->next(cursor);
        };
        if (del.size() == 1) return go_on();
        self->conn->send(del, [self, go_on](std::optional<RedisReply> d) {
          if (!d || d->isError()) return self->done(-1);
          self->count += d->integer;
          go_on();
        });
      });
    }
  };
  auto scan = std::make_shared<Scan>();
  scan->conn = std::move(conn);
  scan->pattern = pattern;
  scan->done = std::move(done);
  scan->next("0");
}

}  // namespace tahua
