// OpenTelemetry traces: a server span per request and a client span per upstream
// attempt (retries and fallbacks are separate attempts), with the GenAI semantic
// conventions' attributes. The W3C traceparent a request arrives with is continued
// (or a trace started) and sent to every upstream attempt with that attempt's span as
// the parent. A request that is sampled or failed is handed to the TraceExporter at
// onComplete as one compact record (telemetry/span_record.h) in the worker's
// ExportBuffer; the exporter's thread encodes it. One that is not costs its ids and the
// traceparent header.
#pragma once

#include <memory>

#include "filters/filter.h"
#include "telemetry/export_queue.h"

namespace tahua {

std::unique_ptr<Filter> makeTracingFilter(const Config& config, ExportBuffer& spans);

}  // namespace tahua
