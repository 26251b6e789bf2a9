// What a worker hands the trace exporter for one traced request: a compact record of
// fixed-size parts (ids, times, numbers) followed by the bytes of its strings, written
// into the worker's ExportBuffer with a few memcpys. No JSON, no protobuf, no maps on
// the worker: the exporter's thread turns records into OTLP (telemetry/otlp_spans.h).
//
// Layout, unaligned in the batch (read back with memcpy):
//   ServerSpan | AttemptSpan x ServerSpan::kept | the strings' bytes
// Strings are copied (the config they come from may be replaced by a reload before the
// exporter reads them), except literals with static storage (error codes, end reasons,
// operation names), which are kept as pointers.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "telemetry/json_out.h"
#include "telemetry/packed_record.h"  // PackedText, PackedLiteral: the strings of a record

namespace tahua {

// One upstream attempt: a client span, a child of the server span.
struct AttemptSpan {
  std::array<std::uint8_t, 8> span_id{};
  std::int64_t start_ns = 0, first_byte_ns = 0, end_ns = 0;  // Unix nanoseconds; first byte 0: none
  std::int32_t status = 0;                                    // the upstream's HTTP status, 0: none
  std::uint16_t port = 0;
  bool has_provider = false, has_deployment = false;
  PackedLiteral error;  // the attempt's error code, empty when none
  PackedText provider_type, provider_host, provider_name;
  PackedText upstream_model, deployment_id, deployment_version;
};

// The request: the server span, and what its attempts share.
struct ServerSpan {
  std::uint32_t size = 0;  // bytes of the whole record
  std::uint8_t kept = 0;   // AttemptSpans that follow
  bool continued = false;  // parent_id is the caller's span
  bool failed = false;     // the status is an error
  bool streaming = false;
  bool has_endpoint = false;  // an API request (gen_ai.* attributes)
  bool capture = false;       // input/output hold the captured text
  bool answered = false;      // the last kept attempt answered the client
  std::array<std::uint8_t, 16> trace_id{};
  std::array<std::uint8_t, 8> span_id{}, parent_id{};
  std::int64_t start_ns = 0, end_ns = 0, first_byte_ns = 0;  // first byte 0: none
  std::int32_t status = 0;
  std::int32_t attempts = 0;  // attempts made, kept or not
  std::int64_t max_tokens = 0, prompt_tokens = -1, completion_tokens = -1;
  double temperature = -1;
  PackedLiteral operation, end_reason, error, finish_reason;
  PackedText method, path, request_id, request_model, response_model, provider_type;
  PackedText model, route, route_reason, deployment_id, deployment_version, tenant, key, fallback;
  PackedText input, output;
};

// Lays out one record: strings are given offsets as they are named (text()), then
// write() copies the fixed parts and the strings into the buffer with one reservation.
class SpanRecordWriter {
 public:
  static constexpr std::size_t kMaxTexts = 16 + 6 * 8;  // ServerSpan's and 8 attempts'
  explicit SpanRecordWriter(std::size_t attempts)
      : offset_(static_cast<std::uint32_t>(sizeof(ServerSpan) + attempts * sizeof(AttemptSpan))) {}

  PackedText text(std::string_view s) {
    PackedText t{offset_, static_cast<std::uint32_t>(s.size())};
    texts_[count_++] = s;
    offset_ += t.size;
    return t;
  }
  // `server.kept` attempts from `attempts`; sets server.size.
  void write(JsonBuf& out, ServerSpan& server, const AttemptSpan* attempts);

 private:
  std::uint32_t offset_;
  std::size_t count_ = 0;
  std::array<std::string_view, kMaxTexts> texts_;
};

// Reads a batch of records back, on the exporter's thread.
class SpanRecordReader {
 public:
  explicit SpanRecordReader(std::string_view batch) : rest_(batch) {}
  // The next record, or false at the end (or at a record that does not fit: a bug).
  bool next();
  const ServerSpan& server() const { return server_; }
  AttemptSpan attempt(std::size_t i) const {
    AttemptSpan a;
    std::memcpy(&a, record_.data() + sizeof(ServerSpan) + i * sizeof(AttemptSpan), sizeof a);
    return a;
  }
  std::string_view text(PackedText t) const { return record_.substr(t.offset, t.size); }

 private:
  std::string_view rest_, record_;
  ServerSpan server_;
};

// A steady-clock instant, in nanoseconds since its epoch, as Unix nanoseconds (one
// offset for the process).
std::int64_t unixNanosFromSteady(std::int64_t steady_ns);

}  // namespace tahua
