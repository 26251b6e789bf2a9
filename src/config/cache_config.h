// The response cache: the top-level `cache` section and the policy a model's own
// `cache:` sets (loadCache and cachePolicy in cache_section.cpp).
#pragma once

#include <cstddef>
#include <string>

#include "core/duration.h"

namespace tahua {

// Which answers of a model the response cache keeps (`cache:` and a model's `cache:`).
struct CachePolicy {
  bool enabled = false;
  Millis ttl{3'600'000};
  std::size_t max_entry_bytes = 1 << 20;  // a larger answer is not kept
  bool all_requests = false;              // false: only requests with `temperature: 0`
  // How long after its ttl an entry may still answer when every upstream failed (as a
  // marked fallback answer); 0: never.
  Millis stale_if_error{0};
  // The semantic layer: a request whose last user message is close enough (cosine
  // similarity of embeddings from `embedding_model`, one of the gateway's own `openai`-type
  // models) to a kept one's, all else equal, gets its answer.
  bool semantic = false;
  std::string embedding_model;
  double threshold = 0.95;
};

// The exact response cache (src/cache/, filter src/filters/cache/).
struct CacheConfig {
  CachePolicy defaults;                   // for models without their own `cache`
  std::size_t max_bytes = 256u << 20;     // the in-process layer, per replica
  bool per_key = false;                   // entries per API key rather than per tenant
  bool key_user = false;                  // the request's `user` is part of the key
  bool hit_tokens = false;                // a hit counts its tokens against token limits (else zero)
  std::string redis_url;                  // a shared layer (a Redis of its own, evicting)
  Millis redis_timeout{200};              // a Redis lookup slower than this is a miss
  Millis local_ttl{60'000};               // with Redis: the in-process copy lives at most this long
  // The semantic layer's vectors (in process, per replica): at most this many in all and
  // per tenant (a tenant beyond its share replaces its own oldest, never another's).
  std::size_t semantic_max_entries = 20'000;
  std::size_t semantic_max_entries_per_tenant = 2'000;
  Millis embedding_timeout{2'000};       // a slower embedding is a miss (the request goes on)
};

}  // namespace tahua
