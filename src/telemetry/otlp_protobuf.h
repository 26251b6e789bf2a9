// OTLP/HTTP's binary encoding of spans (`tracing.protocol: protobuf`, the default):
// an ExportTraceServiceRequest (the messages of telemetry/otlp_trace.proto, from the
// OTLP specification) written in protobuf's wire format (telemetry/protobuf_wire.h) on
// the trace exporter's thread.
#pragma once

#include <memory>
#include <string_view>

#include "telemetry/otlp_spans.h"

namespace tahua {

std::unique_ptr<SpanEncoder> makeOtlpProtobufEncoder(std::string_view service_name);

}  // namespace tahua
