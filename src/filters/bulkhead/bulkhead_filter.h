#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

// Caps requests (and, separately, streams) in flight, so a flood cannot exhaust the
// gateway: over a cap the request is answered 429 concurrency_limit_exceeded with
// Retry-After at once, before any upstream work. Each worker enforces its share of the
// configured caps (limit / workers, rounded up): no counter shared across threads.
// Per-tenant and per-key bulkheads arrive with tenants.
struct BulkheadCounters {  // owned by the worker, so a reload (new chain) keeps them
  std::size_t requests = 0;
  std::size_t streams = 0;
};

std::unique_ptr<Filter> makeBulkheadFilter(BulkheadCounters& counters, unsigned workers);

}  // namespace tahua
