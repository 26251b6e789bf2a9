#include "telemetry/usage_record.h"

#include <algorithm>
#include <chrono>

#include "telemetry/trace_context.h"

namespace tahua {

void appendUsageJson(JsonBuf& batch, std::string_view json) {
  UsageRecordHead head;
  head.kind = UsageRecordHead::kJson;
  PackedWriter<UsageRecordHead, 1> w;
  head.json = w.text(json);
  w.write(batch, head);
}

namespace {

// The room a record's line can take: every string escaped at worst (6 bytes a byte, and
// its quotes), the literals' texts, and the keys and numbers (under 2 KiB together).
std::size_t lineBound(const UsageRecordHead& r) {
  return 6 * (r.size + r.api.size + r.end_reason.size + r.usage_source.size) + 10 * (40 + kRecordFieldCount) + 4096;
}

}  // namespace

std::size_t formatUsageRecords(std::string_view batch, JsonBuf& out) {
  namespace j = json_out;
  using j::literalAt;
  using namespace std::chrono;
  PackedReader<UsageRecordHead> reader(batch);
  std::size_t count = 0;
  while (reader.next()) {
    const UsageRecordHead& r = reader.head();
    ++count;
    if (r.kind == UsageRecordHead::kJson) {
      out.raw(reader.text(r.json));
      out.push_back('\n');
      continue;
    }
    // One reservation for the line, then writes through p (json_out.h's *At functions).
    char* p = out.reserve(lineBound(r));
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
    auto timestamp = [&](std::int64_t ns) { p = j::timeAt(p, system_clock::time_point(duration_cast<system_clock::duration>(nanoseconds(ns)))); };
    p = literalAt(p, "{\"record_id\":\"");  // first, at a fixed place: sinks read it without parsing
    uuidV7(p);
    p += 36;
    field("\",\"request_id\":", r.request_id);
    p = literalAt(p, ",\"ts\":");
    timestamp(r.start_ns);
    p = literalAt(p, ",\"end_ts\":");
    timestamp(r.end_ns);
    if (r.gateway.size) field(",\"gateway\":", r.gateway);
    if (r.region.size) field(",\"region\":", r.region);  // several regions bill through one pipeline
    fieldOrNull(",\"tenant\":", r.has_tenant, r.tenant);
    fieldOrNull(",\"key\":", r.has_key, r.key);
    fieldOrNull(",\"key_prefix\":", r.key_prefix.size > 0, r.key_prefix);
    // A caller signed in with a JWT: who (per-person figures live here, never in metrics).
    fieldOrNull(",\"issuer\":", r.has_caller, r.issuer);
    fieldOrNull(",\"subject\":", r.has_caller, r.subject);
    p = literalAt(p, ",\"api\":");
    p = j::stringAt(p, r.api.view());
    field(",\"method\":", r.method);
    field(",\"path\":", r.path);
    fieldOrNull(",\"requested_model\":", r.has_requested_model, r.requested_model);
    fieldOrNull(",\"model\":", r.has_model, r.model);
    fieldOrNull(",\"provider\":", r.has_provider, r.provider);
    fieldOrNull(",\"deployment\":", r.has_deployment, r.deployment);
    fieldOrNull(",\"version\":", r.has_deployment, r.version);
    fieldOrNull(",\"route_name\":", r.route_name.size > 0, r.route_name);
    p = r.stream ? literalAt(p, ",\"stream\":true,\"status\":") : literalAt(p, ",\"stream\":false,\"status\":");
    p = j::integerAt(p, r.status);
    p = literalAt(p, ",\"end_reason\":");
    p = j::stringAt(p, r.end_reason.view());
    fieldOrNull(",\"error\":", r.has_error, r.error);
    p = r.replayed ? literalAt(p, ",\"replayed\":true") : literalAt(p, ",\"replayed\":false");
    // Billed tokens: what the rate-limit calibration charged.
    const std::int64_t prompt = std::max<std::int64_t>(r.prompt_tokens, 0), completion = std::max<std::int64_t>(r.completion_tokens, 0);
    p = literalAt(p, ",\"prompt_tokens\":");
    p = j::integerAt(p, prompt);
    p = literalAt(p, ",\"completion_tokens\":");
    p = j::integerAt(p, completion);
    p = literalAt(p, ",\"cached_tokens\":");
    p = j::integerAt(p, std::max<std::int64_t>(r.cached_tokens, 0));
    p = literalAt(p, ",\"total_tokens\":");
    p = j::integerAt(p, prompt + completion);
    // Units priced besides tokens: null when the endpoint has none.
    p = literalAt(p, ",\"images\":");
    p = r.images >= 0 ? j::integerAt(p, r.images) : literalAt(p, "null");
    p = literalAt(p, ",\"audio_seconds\":");
    p = r.audio_seconds >= 0 ? j::numberAt(p, r.audio_seconds) : literalAt(p, "null");
    p = literalAt(p, ",\"characters\":");
    p = r.characters >= 0 ? j::integerAt(p, r.characters) : literalAt(p, "null");
    p = literalAt(p, ",\"usage_source\":");
    p = j::stringAt(p, r.usage_source.view());
    p = literalAt(p, ",\"cost_usd\":");
    p = r.cost_usd >= 0 ? j::numberAt(p, r.cost_usd) : literalAt(p, "null");  // null: the model has no pricing
    p = literalAt(p, ",\"duration_ms\":");
    p = j::millisAt(p, nanoseconds(r.duration_ns));
    p = literalAt(p, ",\"ttft_ms\":");
    p = r.has_ttft ? j::millisAt(p, nanoseconds(r.ttft_ns)) : literalAt(p, "null");
    p = literalAt(p, ",\"bytes_out\":");
    p = j::integerAt(p, static_cast<std::int64_t>(r.bytes_out));
    p = literalAt(p, ",\"attempts\":");
    p = j::integerAt(p, r.attempts);
    fieldOrNull(",\"fallback\":", r.fallback.size > 0, r.fallback);
    for (std::size_t i = 0; i < kRecordFieldCount; ++i) {
      const auto f = static_cast<RecordField>(i);
      p = literalAt(p, ",\"");
      p = j::bytesAt(p, recordFieldName(f));
      p = literalAt(p, "\":");
      if (!r.record_field[i].size) p = literalAt(p, "null");
      else if (recordFieldNumeric(f)) p = j::bytesAt(p, reader.text(r.record_field[i]));
      else str(r.record_field[i]);
    }
    p = literalAt(p, ",\"trace_id\":");
    if (r.has_trace) {
      *p++ = '"';
      toHex(r.trace_id.data(), r.trace_id.size(), p);
      p += 32;
      *p++ = '"';
    } else {
      p = literalAt(p, "null");
    }
    p = literalAt(p, "}\n");
    out.advance(p);
  }
  return count;
}

}  // namespace tahua
