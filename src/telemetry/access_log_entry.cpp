#include "telemetry/access_log_entry.h"

#include <chrono>

#include "telemetry/trace_context.h"

namespace tahua {

static_assert(kRecordFieldCount <= 16, "AccessLogEntry::record_fields is a 16-bit mask");

namespace {

// The room a line can take: every string escaped at worst (6 bytes a byte, and its
// quotes), the literals' texts, and the keys and numbers (under 2 KiB together).
std::size_t lineBound(const AccessLogEntry& e) {
  return 6 * (e.size + e.api.size + e.end_reason.size + e.timeout.size) + 10 * (40 + kRecordFieldCount) + 4096;
}

}  // namespace

std::size_t formatAccessLog(std::string_view entries, JsonBuf& out) {
  namespace j = json_out;
  using j::literalAt;
  using namespace std::chrono;
  PackedReader<AccessLogEntry> reader(entries);
  std::size_t count = 0;
  while (reader.next()) {
    const AccessLogEntry& e = reader.head();
    // One reservation for the line, then writes through p (json_out.h's *At functions).
    char* p = out.reserve(lineBound(e));
    auto str = [&](PackedText t) { p = j::stringAt(p, reader.text(t)); };
    // A key (a literal: its quotes, colon and the comma before it) and its string, or null.
    auto field = [&](const auto& key, PackedText t) {
      p = literalAt(p, key);
      str(t);
    };
    auto fieldOrNull = [&](const auto& key, bool present, PackedText t) {
      p = literalAt(p, key);
      if (present) str(t);
      else p = literalAt(p, "null");
    };
    p = literalAt(p, "{\"ts\":");
    p = j::timeAt(p, system_clock::time_point(duration_cast<system_clock::duration>(milliseconds(e.ts_ms))));
    p = e.status >= 500   ? literalAt(p, ",\"level\":\"error\",\"request_id\":")
        : e.status >= 400 ? literalAt(p, ",\"level\":\"warn\",\"request_id\":")
                          : literalAt(p, ",\"level\":\"info\",\"request_id\":");
    str(e.request_id);
    if (e.has_trace) {
      p = literalAt(p, ",\"trace_id\":\"");
      toHex(e.trace_id.data(), e.trace_id.size(), p);
      p += 32;
      p = literalAt(p, "\",\"span_id\":\"");
      toHex(e.span_id.data(), e.span_id.size(), p);
      p += 16;
      *p++ = '"';
    }
    field(",\"method\":", e.method);
    field(",\"path\":", e.path);
    fieldOrNull(",\"model\":", e.has_model, e.model);
    fieldOrNull(",\"provider\":", e.has_provider, e.provider);
    fieldOrNull(",\"deployment\":", e.has_deployment, e.deployment);
    fieldOrNull(",\"version\":", e.has_deployment, e.version);
    if (e.upstream_address.size) field(",\"upstream_address\":", e.upstream_address);
    if (e.route.size) field(",\"route\":", e.route);
    if (e.route_name.size) field(",\"route_name\":", e.route_name);
    // Who called: the tenant, the key's name and its display prefix (never the key).
    if (e.has_tenant) field(",\"tenant\":", e.tenant);
    if (e.has_key) {
      field(",\"key\":", e.key);
      if (e.key_prefix.size) field(",\"key_prefix\":", e.key_prefix);
    }
    if (e.fallback.size) {
      field(",\"fallback\":", e.fallback);
      if (e.has_requested_model) field(",\"requested_model\":", e.requested_model);
    }
    for (std::size_t i = 0; i < kRecordFieldCount; ++i)
      if (e.record_fields & (1u << i)) {
        const auto f = static_cast<RecordField>(i);
        p = literalAt(p, ",\"");
        p = j::bytesAt(p, recordFieldName(f));
        p = literalAt(p, "\":");
        if (recordFieldNumeric(f)) p = j::bytesAt(p, reader.text(e.record_field[i]));
        else str(e.record_field[i]);
      }
    p = literalAt(p, ",\"status\":");
    p = j::integerAt(p, e.status);
    p = e.streaming ? literalAt(p, ",\"stream\":true,\"bytes_in\":") : literalAt(p, ",\"stream\":false,\"bytes_in\":");
    p = j::integerAt(p, static_cast<std::int64_t>(e.bytes_in));
    p = literalAt(p, ",\"bytes_out\":");
    p = j::integerAt(p, static_cast<std::int64_t>(e.bytes_out));
    p = literalAt(p, ",\"duration_ms\":");
    p = j::millisAt(p, nanoseconds(e.duration_ns));
    p = literalAt(p, ",\"ttft_ms\":");
    p = e.has_ttft ? j::millisAt(p, nanoseconds(e.ttft_ns)) : literalAt(p, "null");
    auto tokens = [&](std::int64_t v) { p = v >= 0 ? j::integerAt(p, v) : literalAt(p, "null"); };
    p = literalAt(p, ",\"prompt_tokens\":");
    tokens(e.prompt_tokens);
    p = literalAt(p, ",\"completion_tokens\":");
    tokens(e.completion_tokens);
    p = literalAt(p, ",\"total_tokens\":");
    tokens(e.total_tokens);
    p = literalAt(p, ",\"cached_tokens\":");
    tokens(e.cached_tokens);
    // Units priced besides tokens, on the lines of the endpoints that have them.
    if (e.images >= 0) {
      p = literalAt(p, ",\"images\":");
      p = j::integerAt(p, e.images);
    }
    if (e.audio_seconds >= 0) {
      p = literalAt(p, ",\"audio_seconds\":");
      p = j::numberAt(p, e.audio_seconds);
    }
    if (e.characters >= 0) {
      p = literalAt(p, ",\"characters\":");
      p = j::integerAt(p, e.characters);
    }
    p = literalAt(p, ",\"cost_usd\":");
    p = e.cost_usd >= 0 ? j::numberAt(p, e.cost_usd) : literalAt(p, "null");
    p = literalAt(p, ",\"api\":");
    p = j::stringAt(p, e.api.view());
    fieldOrNull(",\"error\":", e.has_error, e.error);
    if (e.has_error && e.timeout.data) {
      p = literalAt(p, ",\"timeout\":");
      p = j::stringAt(p, e.timeout.view());
    }
    p = literalAt(p, ",\"end_reason\":");
    p = j::stringAt(p, e.end_reason.view());
    if (e.streaming) {
      p = literalAt(p, ",\"chunks\":");
      p = j::integerAt(p, static_cast<std::int64_t>(e.chunks));
    }
    if (e.attempts > 1) {
      p = literalAt(p, ",\"attempts\":");
      p = j::integerAt(p, e.attempts);
    }
    p = literalAt(p, "}\n");
    out.advance(p);
    ++count;
  }
  return count;
}

}  // namespace tahua
