#pragma once

#include <memory>

#include "filters/filter.h"
#include "telemetry/metrics.h"

namespace tahua {

// Records every request into the worker's own metrics (no sharing, no atomics).
std::unique_ptr<Filter> makeMetricsFilter(WorkerMetrics& metrics);

}  // namespace tahua
