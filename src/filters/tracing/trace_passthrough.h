// With tracing off, the caller's W3C trace context passes through to the upstreams
// unchanged (a gateway that does not participate must not break the caller's trace).
#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

std::unique_ptr<Filter> makeTracePassthroughFilter();

}  // namespace tahua
