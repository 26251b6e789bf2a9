// Decodes what an OTLP/HTTP exporter sends as `application/x-protobuf` with OpenTelemetry
// JS's own decoders (@opentelemetry/otlp-transformer's protobufjs code, generated from
// the opentelemetry-proto definitions), not with tahua's .proto: a field tahua numbered
// wrongly is lost here and the test that reads it fails. The result has the OTLP JSON
// mapping's shape (hex ids, 64-bit integers and times as strings), so the tracing tests
// assert one shape for both encodings.
import root from '@opentelemetry/otlp-transformer/build/src/generated/root.js';

const ExportTraceServiceRequest = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

const hex = (bytes) => (bytes && bytes.length ? Buffer.from(bytes).toString('hex') : undefined);

/** An ExportTraceServiceRequest's bytes as the equivalent OTLP JSON object. */
export function decodeTraceExport(body) {
  const request = ExportTraceServiceRequest.toObject(ExportTraceServiceRequest.decode(body), { longs: String, enums: Number });
  for (const rs of request.resourceSpans ?? [])
    for (const ss of rs.scopeSpans ?? [])
      for (const span of ss.spans ?? []) {
        span.traceId = hex(span.traceId);
        span.spanId = hex(span.spanId);
        if (span.parentSpanId !== undefined) span.parentSpanId = hex(span.parentSpanId);
        if (span.parentSpanId === undefined) delete span.parentSpanId;
        // proto3: an absent code is STATUS_CODE_UNSET (0), which JSON writes out.
        if (span.status) span.status.code ??= 0;
      }
  return request;
}
