#pragma once

#include <memory>

#include "filters/filter.h"
#include "telemetry/access_log_sink.h"

namespace tahua {

// One JSON line per request, written in onComplete. Never logs prompt or completion
// content, nor any header value except the request id.
std::unique_ptr<Filter> makeAccessLogFilter(AccessLogSink& sink);

}  // namespace tahua
