#pragma once

#include <memory>

#include "filters/filter.h"
#include "tenants/tenant_directory.h"

namespace tahua {

class StateStore;
struct WorkerMetrics;

// Request-rate limits, token-rate limits, token quotas and money budgets (`rate_limit`),
// per tenant, per key, per tenant x model and per model (docs/tenants-and-limits.md).
// After the router and the model check, before the bulkhead: it reserves the request's
// estimated tokens (prompt ~ body bytes / 4, plus max_tokens or
// rate_limits.default_max_tokens) and money in every limit that applies, atomically in
// the state store, or answers 429 (Retry-After; a request larger than a limit's whole
// capacity: request_exceeds_limit, no Retry-After). onComplete calibrates each token
// bucket, quota and budget to the real usage: refunds an over-reservation and charges an
// under-reservation. Every answer carries x-ratelimit-{limit,remaining,reset}-{requests,
// tokens} of the tightest applicable limit, in place of the upstream's.
std::unique_ptr<Filter> makeRateLimitFilter(const Config& config, TenantDirectoryPtr directory, StateStore& store,
                                            WorkerMetrics& metrics);

// Whether any limit is configured (else the filter is left out of the chain).
bool rateLimitsConfigured(const Config& config, const TenantDirectory& directory);

}  // namespace tahua
