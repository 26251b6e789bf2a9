// An access-log line as the worker hands it to the log's writer thread: a packed record
// (telemetry/packed_record.h) of the request's numbers, flags and strings, which the
// writer formats as the JSON line (docs/observability.md#access-log). The worker does
// no JSON: the filter (filters/access_log/) fills the entry, the writer formats it.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "telemetry/record_field.h"
#include "telemetry/json_out.h"
#include "telemetry/packed_record.h"

namespace tahua {

struct AccessLogEntry {
  std::uint32_t size = 0;  // bytes of the entry, its strings included
  std::int32_t status = 0;
  std::int32_t attempts = 0;
  std::int64_t ts_ms = 0;        // when the request completed: Unix milliseconds
  std::int64_t duration_ns = 0;  // start to end
  std::int64_t ttft_ns = 0;      // start to the first byte written, when has_ttft
  std::uint64_t bytes_in = 0, bytes_out = 0, chunks = 0;
  std::int64_t prompt_tokens = -1, completion_tokens = -1, total_tokens = -1, cached_tokens = -1;  // -1: null
  std::int64_t images = -1, characters = -1;  // -1: absent
  double audio_seconds = -1;                  // < 0: absent
  double cost_usd = -1;                       // < 0: null
  std::array<std::uint8_t, 16> trace_id{};
  std::array<std::uint8_t, 8> span_id{};
  bool has_trace = false, has_ttft = false, streaming = false;
  bool has_model = false, has_provider = false, has_deployment = false;
  bool has_tenant = false, has_key = false, has_requested_model = false, has_error = false;
  std::uint16_t record_fields = 0;  // bit i: record field i is set
  PackedLiteral api, end_reason, timeout;  // timeout: null when none
  PackedText request_id, method, path, model, provider, deployment, version, upstream_address, route, route_name;
  PackedText tenant, key, key_prefix, fallback, requested_model, error;
  std::array<PackedText, kRecordFieldCount> record_field{};
};

// The entry's strings: at most 16 of its own and every record field.
using AccessLogEntryWriter = PackedWriter<AccessLogEntry, 16 + kRecordFieldCount>;

// Appends the JSON line (with its '\n') of every entry in `entries` to `out`; returns
// how many.
std::size_t formatAccessLog(std::string_view entries, JsonBuf& out);

}  // namespace tahua
