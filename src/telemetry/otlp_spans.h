// What the spans of a record say, in OTLP's terms, for either encoding: the span's ids,
// name, kind and times, its attributes (the GenAI semantic conventions' and tahua's),
// its event and its status. describeSpans() walks a record and tells a SpanSink; the
// JSON and protobuf encoders (otlp_json.h, otlp_protobuf.h) are sinks, so both say the
// same thing. Runs on the trace exporter's thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "telemetry/span_record.h"

namespace tahua {

enum class SpanKind : int { Server = 2, Client = 3 };  // OTLP's Span.SpanKind

struct SpanHead {
  const std::array<std::uint8_t, 16>* trace_id;
  const std::array<std::uint8_t, 8>* span_id;
  const std::array<std::uint8_t, 8>* parent_id;  // null: a root span
  std::string_view name, name2;                   // the name is `name`, or `name name2`
  SpanKind kind;
  std::int64_t start_ns, end_ns;
};

class SpanSink {
 public:
  virtual ~SpanSink() = default;
  virtual void beginSpan(const SpanHead& head) = 0;
  // Attributes. Keys are literals without characters to escape.
  virtual void str(std::string_view key, std::string_view value) = 0;
  virtual void integer(std::string_view key, std::int64_t value) = 0;
  virtual void dbl(std::string_view key, double value) = 0;
  virtual void boolean(std::string_view key, bool value) = 0;
  virtual void strList(std::string_view key, std::string_view value) = 0;  // an array of one string
  // After the attributes: one event (`event_name` empty: none), then the status (OTLP's
  // STATUS_CODE_ERROR with `message`, or UNSET).
  virtual void endSpan(std::string_view event_name, std::int64_t event_ns, bool error, std::string_view message) = 0;
};

// Spans in one record: the server span and its kept attempts.
inline std::size_t spanCount(const ServerSpan& s) { return 1 + s.kept; }

// Tells `sink` every span of the reader's current record.
void describeSpans(const SpanRecordReader& record, SpanSink& sink);

// An encoding of batches of spans into export request bodies (OTLP/HTTP).
class SpanEncoder {
 public:
  virtual ~SpanEncoder() = default;
  virtual std::string_view contentType() const = 0;
  // Adds the current record's spans to the request being built.
  virtual void add(const SpanRecordReader& record) = 0;
  // The request's body (ExportTraceServiceRequest), every span added since the last
  // call; the encoder starts again empty.
  virtual void finish(std::string& body) = 0;
};

// gen_ai.provider.name for a provider type ("azure" -> "azure.ai.openai").
std::string_view genAiProviderName(std::string_view type);

}  // namespace tahua
