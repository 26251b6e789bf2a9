// A usage record as the worker hands it to the UsageExporter: a packed record
// (telemetry/packed_record.h) of the request's numbers, flags and strings, which the
// exporter's thread formats as the record's JSON (docs/usage-record.schema.json), the
// same text for every sink, its spill and the ledger. The worker does no JSON: the usage
// filter (filters/usage/) fills the record; its record_id is made when it is formatted.
//
// A record may also travel as JSON already (kind kJson): one that waited on the worker
// for a late verdict (filters/usage/pending_records.h) is held, and superseded, as text.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "telemetry/record_field.h"
#include "telemetry/json_out.h"
#include "telemetry/packed_record.h"

namespace tahua {

struct UsageRecordHead {
  static constexpr std::uint8_t kPacked = 0, kJson = 1;
  std::uint32_t size = 0;  // bytes of the record, its strings included
  std::uint8_t kind = kPacked;
  bool stream = false, replayed = false, has_trace = false, has_ttft = false;
  bool has_tenant = false, has_key = false, has_caller = false, has_requested_model = false;
  bool has_model = false, has_provider = false, has_deployment = false, has_error = false;
  std::int32_t status = 0, attempts = 0;
  std::int64_t start_ns = 0, end_ns = 0;  // Unix nanoseconds (the wall clock when it was recorded, less the steady times)
  std::int64_t duration_ns = 0, ttft_ns = 0;
  std::uint64_t bytes_out = 0;
  // Billed: as settled, negatives written as 0 (tokens) or null (the other units).
  std::int64_t prompt_tokens = -1, completion_tokens = -1, cached_tokens = -1, images = -1, characters = -1;
  double audio_seconds = -1, cost_usd = -1;  // < 0: null
  std::array<std::uint8_t, 16> trace_id{};
  PackedLiteral api, end_reason, usage_source;
  PackedText json;  // kind kJson: the whole record
  PackedText request_id, gateway, region, tenant, key, key_prefix, issuer, subject, method, path;
  PackedText requested_model, model, provider, deployment, version, route_name, error, fallback;
  std::array<PackedText, kRecordFieldCount> record_field{};
};

using UsageRecordWriter = PackedWriter<UsageRecordHead, 18 + kRecordFieldCount>;

// Appends a record that is JSON already (one whole record, no '\n') to a batch.
void appendUsageJson(JsonBuf& batch, std::string_view json);

// Appends the JSON line (with its '\n') of every record in `batch` to `out`, each packed
// one given a fresh record_id; returns how many.
std::size_t formatUsageRecords(std::string_view batch, JsonBuf& out);

}  // namespace tahua
