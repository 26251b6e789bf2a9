#pragma once

#include <memory>

#include "filters/filter.h"
#include "telemetry/access_log_sink.h"

namespace tahua {

// One JSON line per request: in onComplete the request's numbers and strings go into an
// entry in the worker's buffer (no JSON on the worker); the log's writer thread formats it.
// Never logs prompt or completion content, nor any header value except the request id.
// Lines of successful requests (< 400) are thinned to access_log.sample_success
// (exactly: every 1/ratio-th line); errors are always written.
std::unique_ptr<Filter> makeAccessLogFilter(AccessLogSink& sink, const AccessLogConfig& config);

}  // namespace tahua
