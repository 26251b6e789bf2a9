// OpenTelemetry traces: a server span per request and a client span per upstream
// attempt (retries and fallbacks are separate attempts), with the GenAI semantic
// conventions' attributes. The W3C traceparent a request arrives with is continued
// (or a trace started) and sent to every upstream attempt with that attempt's span as
// the parent. Spans are written as OTLP JSON into the worker's ExportBuffer at
// onComplete when the request is sampled or failed; the TraceExporter sends them.
#pragma once

#include <memory>

#include "filters/filter.h"
#include "telemetry/export_queue.h"

namespace tahua {

std::unique_ptr<Filter> makeTracingFilter(const Config& config, ExportBuffer& spans);

// gen_ai.provider.name for a provider type ("azure" -> "azure.ai.openai").
std::string_view genAiProviderName(std::string_view type);

}  // namespace tahua
