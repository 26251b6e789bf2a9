#include "telemetry/access_log_entry.h"

#include <chrono>

#include "telemetry/trace_context.h"

namespace tahua {

static_assert(kRecordFieldCount <= 16, "AccessLogEntry::record_fields is a 16-bit mask");

std::size_t formatAccessLog(std::string_view entries, JsonBuf& out) {
  namespace j = json_out;
  using namespace std::chrono;
  PackedReader<AccessLogEntry> reader(entries);
  std::size_t count = 0;
  while (reader.next()) {
    const AccessLogEntry& e = reader.head();
    auto text = [&](PackedText t) { return reader.text(t); };
    auto strOrNull = [&](std::string_view k, bool present, PackedText v) {
      j::key(out, k);
      if (present) j::string(out, text(v));
      else out.raw(std::string_view("null"));
    };
    out.raw(std::string_view("{\"ts\":"));
    j::time(out, system_clock::time_point(duration_cast<system_clock::duration>(milliseconds(e.ts_ms))));
    j::key(out, "level");
    j::string(out, e.status >= 500 ? "error" : e.status >= 400 ? "warn" : "info");
    j::key(out, "request_id");
    j::string(out, text(e.request_id));
    if (e.has_trace) {
      char hex[32];
      toHex(e.trace_id.data(), e.trace_id.size(), hex);
      j::key(out, "trace_id");
      j::string(out, std::string_view(hex, 32));
      toHex(e.span_id.data(), e.span_id.size(), hex);
      j::key(out, "span_id");
      j::string(out, std::string_view(hex, 16));
    }
    j::key(out, "method");
    j::string(out, text(e.method));
    j::key(out, "path");
    j::string(out, text(e.path));
    strOrNull("model", e.has_model, e.model);
    strOrNull("provider", e.has_provider, e.provider);
    strOrNull("deployment", e.has_deployment, e.deployment);
    strOrNull("version", e.has_deployment, e.version);
    if (e.upstream_address.size) strOrNull("upstream_address", true, e.upstream_address);
    if (e.route.size) strOrNull("route", true, e.route);
    if (e.route_name.size) strOrNull("route_name", true, e.route_name);
    // Who called: the tenant, the key's name and its display prefix (never the key).
    if (e.has_tenant) strOrNull("tenant", true, e.tenant);
    if (e.has_key) {
      strOrNull("key", true, e.key);
      if (e.key_prefix.size) strOrNull("key_prefix", true, e.key_prefix);
    }
    if (e.fallback.size) {
      strOrNull("fallback", true, e.fallback);
      if (e.has_requested_model) strOrNull("requested_model", true, e.requested_model);
    }
    for (std::size_t i = 0; i < kRecordFieldCount; ++i)
      if (e.record_fields & (1u << i)) {
        const auto f = static_cast<RecordField>(i);
        j::key(out, recordFieldName(f));
        if (recordFieldNumeric(f)) out.raw(text(e.record_field[i]));
        else j::string(out, text(e.record_field[i]));
      }
    j::key(out, "status");
    j::integer(out, e.status);
    j::key(out, "stream");
    out.raw(e.streaming ? std::string_view("true") : std::string_view("false"));
    j::key(out, "bytes_in");
    j::integer(out, static_cast<std::int64_t>(e.bytes_in));
    j::key(out, "bytes_out");
    j::integer(out, static_cast<std::int64_t>(e.bytes_out));
    j::key(out, "duration_ms");
    j::millis(out, nanoseconds(e.duration_ns));
    j::key(out, "ttft_ms");
    if (e.has_ttft) j::millis(out, nanoseconds(e.ttft_ns));
    else out.raw(std::string_view("null"));
    auto tokens = [&](std::string_view k, std::int64_t v) {
      j::key(out, k);
      if (v >= 0) j::integer(out, v);
      else out.raw(std::string_view("null"));
    };
    tokens("prompt_tokens", e.prompt_tokens);
    tokens("completion_tokens", e.completion_tokens);
    tokens("total_tokens", e.total_tokens);
    tokens("cached_tokens", e.cached_tokens);
    // Units priced besides tokens, on the lines of the endpoints that have them.
    if (e.images >= 0) tokens("images", e.images);
    if (e.audio_seconds >= 0) {
      j::key(out, "audio_seconds");
      j::number(out, e.audio_seconds);
    }
    if (e.characters >= 0) tokens("characters", e.characters);
    j::key(out, "cost_usd");
    if (e.cost_usd >= 0) j::number(out, e.cost_usd);
    else out.raw(std::string_view("null"));
    j::key(out, "api");
    j::string(out, e.api.view());
    strOrNull("error", e.has_error, e.error);
    if (e.has_error && e.timeout.data) {
      j::key(out, "timeout");
      j::string(out, e.timeout.view());
    }
    j::key(out, "end_reason");
    j::string(out, e.end_reason.view());
    if (e.streaming) {
      j::key(out, "chunks");
      j::integer(out, static_cast<std::int64_t>(e.chunks));
    }
    if (e.attempts > 1) {
      j::key(out, "attempts");
      j::integer(out, e.attempts);
    }
    out.raw(std::string_view("}\n"));
    ++count;
  }
  return count;
}

}  // namespace tahua
