#pragma once

#include <memory>

#include "filters/bulkhead/concurrency_limit.h"
#include "filters/filter.h"
#include "filters/worker_services.h"
#include "tenants/tenant_directory.h"

namespace tahua {

struct WorkerMetrics;

// Caps requests (and, separately, streams) in flight, for the whole gateway
// (limits.max_concurrent_*) and per route (routes[].limits), so a flood cannot exhaust
// the gateway or one route starve the others. Over a cap the request is answered 429
// concurrency_limit_exceeded with Retry-After, before any upstream work, or, with
// limits.queue_timeout, waits in line for a slot (the filter pauses the request; a freed
// slot or the timeout resumes it). Caps are process-wide (shared by the workers).
// Tenants and keys have caps of their own (limits.max_concurrent_*, from `directory`;
// null: none).
std::unique_ptr<Filter> makeBulkheadFilter(Bulkheads& bulkheads, const Config& config, TenantDirectoryPtr directory,
                                           WorkerMetrics& metrics, WorkerServices& services);

}  // namespace tahua
