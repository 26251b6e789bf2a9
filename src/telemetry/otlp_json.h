// OTLP/HTTP's JSON encoding of spans (`tracing.protocol: json`): ids as hex, 64-bit
// integers and nanosecond times as strings, per the OTLP JSON mapping. Written on the
// trace exporter's thread through JsonBuf.
#pragma once

#include <memory>
#include <string_view>

#include "telemetry/otlp_spans.h"

namespace tahua {

std::unique_ptr<SpanEncoder> makeOtlpJsonEncoder(std::string_view service_name);

}  // namespace tahua
