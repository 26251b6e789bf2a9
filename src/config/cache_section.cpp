// The response cache: the top-level `cache` section (every model's default policy, and
// the cache's own bounds and shared layer) and the policy a model's `cache:` sets.
#include "config/loader_detail.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

// The in-process layer, the Redis client and the semantic index are made at start: their
// fields are read then (docs/response-cache.md); the policies reload.
constexpr Field kCacheFields[] = {
    boolean("enabled", "false", "Keep and replay answers; the default for every model (a model's `cache:` overrides it)."),
    duration("ttl", 1'000, "1h", "An answer is kept this long."),
    integer("max_entry_bytes", 1024, 64ull << 20, "1048576", "A larger answer is not kept."),
    choice("cacheable", "zero_temperature | all", "zero_temperature",
           "Which requests are kept: zero_temperature (`temperature: 0` only) or all."),
    duration("stale_if_error", 0, "0s",
             "How long past its ttl an entry may answer, marked as a fallback, when every upstream failed; 0s: never."),
    section("semantic", "The semantic layer: bounds and the embedding call."),
    integer("max_bytes", 1 << 20, 1ull << 40, "268435456", "The in-process layer, per replica (LRU, bounded in bytes).")
        .atRestart(),
    choice("scope", "tenant | key", "tenant", "key: entries per API key rather than per tenant."),
    boolean("key_user", "false", "The request's `user` is part of the key."),
    choice("hit_tokens", "zero | tokens", "zero", "What a hit counts against token limits and quotas: zero, or its tokens."),
    section("redis", "A shared layer: a Redis of the cache's own (an evicting one, not the store's).").atRestart(),
    duration("local_ttl", 0, "60s", "With redis: how long a replica keeps its own copy of an entry (0s: none)."),
};
const Table kCache("cache", "The response cache (docs/response-cache.md); off until a model turns it on.", kCacheFields);

constexpr Field kCacheSemanticFields[] = {
    boolean("enabled", "false",
            "After an exact miss, the closest kept answer at or above `threshold` (cosine similarity of the last user "
            "message's embedding) answers, marked semantic-hit."),
    nonEmpty("embedding_model", "",
             "The model that embeds the messages: one of the gateway's, served by an openai, azure-openai or mock "
             "provider. Required when enabled."),
    number("threshold", 1, "0.95", "The least similarity that answers (above 0).", "a similarity"),
    integer("max_entries", 1, 10'000'000, "20000",
            "Vectors kept in all, per replica (a 1536-float vector is 6 KB); past it an index replaces its own oldest.")
        .atRestart(),
    integer("max_entries_per_tenant", 1, 10'000'000, "2000", "The same per tenant: one tenant never evicts another's.")
        .atRestart(),
    duration("timeout", 1, "2s", "A slower embedding is a miss (the request goes on)."),
};
const Table kCacheSemantic("cache.semantic", "The semantic layer (each model turns it on in its own `cache:`).",
                           kCacheSemanticFields);

constexpr Field kCacheRedisFields[] = {
    nonEmpty("url", "", "redis://host[:port] of a Redis of the cache's own (`maxmemory-policy allkeys-lru`; one server).")
        .atRestart(),
    duration("timeout", 1, "200ms", "A lookup there slower than this (or failing) is a miss.").atRestart(),
};
const Table kCacheRedis("cache.redis", "The shared layer, read by every replica.", kCacheRedisFields);

constexpr Field kModelCacheFields[] = {
    boolean("enabled", "", "Keep and replay this model's answers; absent: `cache.enabled`."),
    duration("ttl", 1'000, "", "An answer is kept this long; absent: `cache.ttl`."),
    integer("max_entry_bytes", 1024, 64ull << 20, "", "A larger answer is not kept; absent: `cache.max_entry_bytes`."),
    choice("cacheable", "zero_temperature | all", "", "Which requests are kept; absent: `cache.cacheable`."),
    duration("stale_if_error", 0, "", "How long past its ttl an entry may answer when every upstream failed; absent: `cache.stale_if_error`."),
    section("semantic", "The semantic layer for this model."),
};
const Table kModelCache("models[].cache", "The model's cache policy, over the `cache` section's field by field.",
                        kModelCacheFields);

constexpr Field kModelSemanticFields[] = {
    boolean("enabled", "", "Look up the closest kept answer after an exact miss; absent: `cache.semantic.enabled`."),
    nonEmpty("embedding_model", "",
             "The model that embeds the messages (an openai, azure-openai or mock provider's); required when enabled."),
    number("threshold", 1, "", "The least cosine similarity that answers (above 0); absent: `cache.semantic.threshold`.",
           "a similarity"),
};
const Table kModelSemantic("models[].cache.semantic",
                           "The model's semantic layer (its bounds and timeout are `cache.semantic`'s).", kModelSemanticFields);

}  // namespace

CachePolicy Loader::cachePolicy(Fields& f, const schema::Table& semantic, const CachePolicy& base) {
  CachePolicy c = base;
  f.read("enabled", c.enabled);
  f.read("ttl", c.ttl);
  f.read("max_entry_bytes", c.max_entry_bytes);
  f.read("stale_if_error", c.stale_if_error);
  if (auto sem = f["semantic"]) {
    Fields sf(*this, sem, f.at("semantic"), semantic);
    sf.read("enabled", c.semantic);
    sf.read("embedding_model", c.embedding_model);
    if (sf.read("threshold", c.threshold) && c.threshold <= 0) fail(sf["threshold"], sf.at("threshold"), "a similarity above 0 (up to 1)");
    if (c.semantic && c.embedding_model.empty()) fail(sem, sf.at("embedding_model"), "required: the model that embeds the messages");
  }
  if (auto v = f["cacheable"]) {
    const std::string w = str(v, f.at("cacheable"));
    if (w != "zero_temperature" && w != "all") fail(v, f.at("cacheable"), "expected zero_temperature or all");
    c.all_requests = w == "all";
  }
  return c;
}

CachePolicy Loader::cachePolicy(const YAML::Node& n, const std::string& p, const CachePolicy& base) {
  Fields f(*this, n, p, kModelCache);
  return cachePolicy(f, kModelSemantic, base);
}

void Loader::loadCache(const YAML::Node& n, Config& cfg) {
  Fields f(*this, n, "cache", kCache);
  CacheConfig& c = cfg.cache;
  c.defaults = cachePolicy(f, kCacheSemantic, c.defaults);
  f.read("max_bytes", c.max_bytes);
  if (auto v = f["scope"]) {
    const std::string scope = str(v, f.at("scope"));
    if (scope != "tenant" && scope != "key") fail(v, f.at("scope"), "expected tenant or key");
    c.per_key = scope == "key";
  }
  f.read("key_user", c.key_user);
  if (auto v = f["hit_tokens"]) {
    const std::string w = str(v, f.at("hit_tokens"));
    if (w != "zero" && w != "tokens") fail(v, f.at("hit_tokens"), "expected zero or tokens");
    c.hit_tokens = w == "tokens";
  }
  if (auto r = f["redis"]) {
    Fields rf(*this, r, f.at("redis"), kCacheRedis);
    rf.read("url", c.redis_url);
    rf.read("timeout", c.redis_timeout);
  }
  f.read("local_ttl", c.local_ttl);
  if (auto sem = f["semantic"]) {
    Fields sf(*this, sem, f.at("semantic"), kCacheSemantic);
    sf.read("max_entries", c.semantic_max_entries);
    sf.read("max_entries_per_tenant", c.semantic_max_entries_per_tenant);
    sf.read("timeout", c.embedding_timeout);
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

}  // namespace tahua::config_detail
