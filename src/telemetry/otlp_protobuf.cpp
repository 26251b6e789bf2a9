#include "telemetry/otlp_protobuf.h"

#include <bit>

#include "telemetry/json_out.h"
#include "telemetry/protobuf_wire.h"

namespace tahua {
namespace {

using namespace protobuf_wire;

// Field numbers of telemetry/otlp_trace.proto (the OTLP specification's).
namespace field {
constexpr unsigned kRequestResourceSpans = 1;               // ExportTraceServiceRequest
constexpr unsigned kResourceSpansResource = 1, kResourceSpansScopeSpans = 2;
constexpr unsigned kResourceAttributes = 1;
constexpr unsigned kScopeSpansScope = 1, kScopeSpansSpans = 2;
constexpr unsigned kScopeName = 1;                          // InstrumentationScope
constexpr unsigned kSpanTraceId = 1, kSpanSpanId = 2, kSpanParentSpanId = 4, kSpanName = 5, kSpanKind = 6,
                   kSpanStart = 7, kSpanEnd = 8, kSpanAttributes = 9, kSpanEvents = 11, kSpanStatus = 15;
constexpr unsigned kEventTime = 1, kEventName = 2;
constexpr unsigned kStatusMessage = 2, kStatusCode = 3;
constexpr unsigned kKeyValueKey = 1, kKeyValueValue = 2;
constexpr unsigned kAnyString = 1, kAnyBool = 2, kAnyInt = 3, kAnyDouble = 4, kAnyArray = 5;
constexpr unsigned kArrayValues = 1;
constexpr std::uint64_t kStatusCodeError = 2;
}  // namespace field

// Writes the ExportTraceServiceRequest with protobuf's wire format directly (see
// docs/design.md for why not protobuf's library): each span into a scratch buffer, then
// behind its tag and length into the request's spans; finish() puts the resource and
// scope in front. Both buffers are kept, so a steady export allocates only the body.
class OtlpProtobufEncoder final : public SpanEncoder, private SpanSink {
 public:
  explicit OtlpProtobufEncoder(std::string_view service_name) {
    // Resource { attributes: [KeyValue { "service.name": AnyValue { string_value } }] }
    const std::size_t any = lenFieldSize(service_name.size());
    const std::string_view key = "service.name";
    const std::size_t kv = lenFieldSize(key.size()) + lenFieldSize(any);
    const std::size_t resource = lenFieldSize(kv);
    char* p = head_.reserve(lenFieldSize(resource) + 3 * kMaxVarint);
    p = lenHead(p, field::kResourceSpansResource, resource);
    p = lenHead(p, field::kResourceAttributes, kv);
    p = bytesField(p, field::kKeyValueKey, key.data(), key.size());
    p = lenHead(p, field::kKeyValueValue, any);
    p = bytesField(p, field::kAnyString, service_name.data(), service_name.size());
    head_.advance(p);
    // ScopeSpans' scope: InstrumentationScope { name: "tahua" }
    const std::string_view scope = "tahua";
    p = scope_.reserve(lenFieldSize(lenFieldSize(scope.size())));
    p = lenHead(p, field::kScopeSpansScope, lenFieldSize(scope.size()));
    p = bytesField(p, field::kScopeName, scope.data(), scope.size());
    scope_.advance(p);
  }

  std::string_view contentType() const override { return "application/x-protobuf"; }

  void add(const SpanRecordReader& record) override { describeSpans(record, *this); }

  void finish(std::string& body) override {
    // ExportTraceServiceRequest { resource_spans: ResourceSpans { resource, scope_spans:
    // ScopeSpans { scope, spans... } } }
    const std::size_t scope_spans = scope_.size() + spans_.size();
    const std::size_t resource_spans = head_.size() + lenFieldSize(scope_spans);
    body.resize(lenFieldSize(resource_spans));
    char* p = body.data();
    p = lenHead(p, field::kRequestResourceSpans, resource_spans);
    std::memcpy(p, head_.data(), head_.size());
    p = lenHead(p + head_.size(), field::kResourceSpansScopeSpans, scope_spans);
    std::memcpy(p, scope_.data(), scope_.size());
    p += scope_.size();
    if (!spans_.empty()) std::memcpy(p, spans_.data(), spans_.size());
    spans_.clear();
  }

 private:
  void beginSpan(const SpanHead& h) override {
    span_.clear();
    const std::size_t name = h.name.size() + (h.name2.empty() ? 0 : 1 + h.name2.size());
    char* p = span_.reserve(3 * lenFieldSize(16) + lenFieldSize(name) + 1 + kMaxVarint + 2 * 9);
    p = bytesField(p, field::kSpanTraceId, h.trace_id->data(), h.trace_id->size());
    p = bytesField(p, field::kSpanSpanId, h.span_id->data(), h.span_id->size());
    if (h.parent_id) p = bytesField(p, field::kSpanParentSpanId, h.parent_id->data(), h.parent_id->size());
    p = lenHead(p, field::kSpanName, name);
    std::memcpy(p, h.name.data(), h.name.size());
    p += h.name.size();
    if (!h.name2.empty()) {
      *p++ = ' ';
      std::memcpy(p, h.name2.data(), h.name2.size());
      p += h.name2.size();
    }
    p = varint(tag(p, field::kSpanKind, WireType::Varint), static_cast<std::uint64_t>(h.kind));
    p = fixed64(tag(p, field::kSpanStart, WireType::Fixed64), static_cast<std::uint64_t>(h.start_ns));
    p = fixed64(tag(p, field::kSpanEnd, WireType::Fixed64), static_cast<std::uint64_t>(h.end_ns));
    span_.advance(p);
  }

  // KeyValue { key, value: AnyValue { <value_bytes> } } as a span attribute; returns
  // where the AnyValue's `value_bytes` go (reserved).
  char* attribute(std::string_view key, std::size_t value_bytes) {
    const std::size_t kv = lenFieldSize(key.size()) + lenFieldSize(value_bytes);
    char* p = span_.reserve(lenFieldSize(kv));
    p = lenHead(p, field::kSpanAttributes, kv);
    p = bytesField(p, field::kKeyValueKey, key.data(), key.size());
    return lenHead(p, field::kKeyValueValue, value_bytes);
  }
  void str(std::string_view key, std::string_view value) override {
    span_.advance(bytesField(attribute(key, lenFieldSize(value.size())), field::kAnyString, value.data(), value.size()));
  }
  void integer(std::string_view key, std::int64_t value) override {
    const auto v = static_cast<std::uint64_t>(value);  // int64: two's complement, 10 bytes when negative
    span_.advance(varint(tag(attribute(key, 1 + varintSize(v)), field::kAnyInt, WireType::Varint), v));
  }
  void dbl(std::string_view key, double value) override {
    span_.advance(fixed64(tag(attribute(key, 9), field::kAnyDouble, WireType::Fixed64), std::bit_cast<std::uint64_t>(value)));
  }
  void boolean(std::string_view key, bool value) override {
    span_.advance(varint(tag(attribute(key, 2), field::kAnyBool, WireType::Varint), value ? 1 : 0));
  }
  void strList(std::string_view key, std::string_view value) override {
    // AnyValue { array_value: ArrayValue { values: [AnyValue { string_value }] } }
    const std::size_t item = lenFieldSize(value.size());
    const std::size_t array = lenFieldSize(item);
    char* p = lenHead(attribute(key, lenFieldSize(array)), field::kAnyArray, array);
    p = lenHead(p, field::kArrayValues, item);
    span_.advance(bytesField(p, field::kAnyString, value.data(), value.size()));
  }
  void endSpan(std::string_view event_name, std::int64_t event_ns, bool error, std::string_view message) override {
    const std::size_t event = 9 + lenFieldSize(event_name.size());
    const std::size_t status = error ? lenFieldSize(message.size()) + 2 : 0;
    char* p = span_.reserve(lenFieldSize(event) + lenFieldSize(status));
    if (!event_name.empty()) {
      p = lenHead(p, field::kSpanEvents, event);
      p = fixed64(tag(p, field::kEventTime, WireType::Fixed64), static_cast<std::uint64_t>(event_ns));
      p = bytesField(p, field::kEventName, event_name.data(), event_name.size());
    }
    // Present on every span, as in the JSON encoding (an empty Status is UNSET).
    p = lenHead(p, field::kSpanStatus, status);
    if (error) {
      p = bytesField(p, field::kStatusMessage, message.data(), message.size());
      p = varint(tag(p, field::kStatusCode, WireType::Varint), field::kStatusCodeError);
    }
    span_.advance(p);
    // The span, behind its tag and length, into the request's spans.
    p = spans_.reserve(lenFieldSize(span_.size()));
    spans_.advance(bytesField(p, field::kScopeSpansSpans, span_.data(), span_.size()));
  }

  JsonBuf head_;   // ResourceSpans' resource field
  JsonBuf scope_;  // ScopeSpans' scope field
  JsonBuf spans_;  // ScopeSpans' spans fields, the request's so far
  JsonBuf span_;   // the span being written (its length is known at its end)
};

}  // namespace

std::unique_ptr<SpanEncoder> makeOtlpProtobufEncoder(std::string_view service_name) {
  return std::make_unique<OtlpProtobufEncoder>(service_name);
}

}  // namespace tahua
