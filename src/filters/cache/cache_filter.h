#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

class ResponseCache;
class WorkerServices;
struct WorkerMetrics;

// The exact response cache (`cache`, docs/response-cache.md). For a model (or its
// route) with the cache on, a request the policy allows (by default `temperature: 0`;
// never `n` > 1) is looked up by its key (cache_key.h) within its tenant (or key):
// - a hit is answered by the gateway, in the client's form (cached_answer_forms.h),
//   marked `x-tahua-cache: hit`, counted by the limits as a request and, by config, as
//   zero tokens or as the answer's;
// - a miss goes upstream, and its answer, captured as it passes (a stream is never
//   delayed), is kept only if it completed normally with a 2xx: an error, a cut stream,
//   an answer ended by a limit or a filter, a larger one than max_entry_bytes is not.
// `Cache-Control: no-store` / `x-tahua-cache: bypass` skip both; `no-cache` /
// `x-tahua-cache: refresh` skip the lookup and keep the new answer.
// With `semantic` (per model), an exact miss embeds the last user message (a call to the
// model's embedding_model, made by the worker while the request waits, bounded by
// cache.semantic.timeout) and a kept answer whose message is close enough, all else equal,
// answers: `x-tahua-cache: semantic-hit` with `x-tahua-cache-similarity`. A route with
// `semantic_cache: false` skips it.
// After the rate limits (a hit is a request like any other), before the bulkhead and the
// balancer (a hit takes no slot and picks no upstream).
std::unique_ptr<Filter> makeCacheFilter(ResponseCache& cache, WorkerMetrics& metrics, WorkerServices& services);

}  // namespace tahua
