#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>

#include "filters/filter.h"
#include "routing/balancer.h"
#include "telemetry/metrics.h"

namespace tahua {

// A circuit breaker per deployment (settings from its provider's circuit_breaker
// section), kept in the worker's DeploymentState so it survives reloads. The balancer
// skips deployments whose breaker is open; this filter fails fast with 503 circuit_open
// only when the chosen one is open anyway (every deployment is), lets a few probe calls
// through when half-open, and judges every admitted call (onComplete, onAttemptFailed):
// an upstream error or a 5xx is a failure, a first byte later than slow_call is slow.
// Transitions are logged (the audit trail) and counted per provider and deployment.
std::unique_ptr<Filter> makeCircuitBreakerFilter(WorkerMetrics& metrics);

}  // namespace tahua
