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

std::size_t formatUsageRecords(std::string_view batch, JsonBuf& out) {
  namespace j = json_out;
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
    auto text = [&](PackedText t) { return reader.text(t); };
    auto strOrNull = [&](std::string_view k, bool present, PackedText v) {
      j::key(out, k);
      if (present) j::string(out, text(v));
      else out.raw(std::string_view("null"));
    };
    char id[36];
    uuidV7(id);
    out.raw(std::string_view("{\"record_id\":\""));  // first, at a fixed place: sinks read it without parsing
    out.raw(id, 36);
    out.push_back('"');
    j::key(out, "request_id");
    j::string(out, text(r.request_id));
    j::key(out, "ts");
    j::time(out, system_clock::time_point(duration_cast<system_clock::duration>(nanoseconds(r.start_ns))));
    j::key(out, "end_ts");
    j::time(out, system_clock::time_point(duration_cast<system_clock::duration>(nanoseconds(r.end_ns))));
    if (r.gateway.size) strOrNull("gateway", true, r.gateway);
    if (r.region.size) strOrNull("region", true, r.region);  // several regions bill through one pipeline
    strOrNull("tenant", r.has_tenant, r.tenant);
    strOrNull("key", r.has_key, r.key);
    strOrNull("key_prefix", r.key_prefix.size > 0, r.key_prefix);
    // A caller signed in with a JWT: who (per-person figures live here, never in metrics).
    strOrNull("issuer", r.has_caller, r.issuer);
    strOrNull("subject", r.has_caller, r.subject);
    j::key(out, "api");
    j::string(out, r.api.view());
    j::key(out, "method");
    j::string(out, text(r.method));
    j::key(out, "path");
    j::string(out, text(r.path));
    strOrNull("requested_model", r.has_requested_model, r.requested_model);
    strOrNull("model", r.has_model, r.model);
    strOrNull("provider", r.has_provider, r.provider);
    strOrNull("deployment", r.has_deployment, r.deployment);
    strOrNull("version", r.has_deployment, r.version);
    strOrNull("route_name", r.route_name.size > 0, r.route_name);
    j::key(out, "stream");
    out.raw(r.stream ? std::string_view("true") : std::string_view("false"));
    j::key(out, "status");
    j::integer(out, r.status);
    j::key(out, "end_reason");
    j::string(out, r.end_reason.view());
    strOrNull("error", r.has_error, r.error);
    j::key(out, "replayed");
    out.raw(r.replayed ? std::string_view("true") : std::string_view("false"));
    // Billed tokens: what the rate-limit calibration charged.
    auto tokens = [&](std::string_view k, std::int64_t v) {
      j::key(out, k);
      j::integer(out, std::max<std::int64_t>(v, 0));
    };
    tokens("prompt_tokens", r.prompt_tokens);
    tokens("completion_tokens", r.completion_tokens);
    tokens("cached_tokens", r.cached_tokens);
    tokens("total_tokens", std::max<std::int64_t>(r.prompt_tokens, 0) + std::max<std::int64_t>(r.completion_tokens, 0));
    // Units priced besides tokens: null when the endpoint has none.
    j::key(out, "images");
    if (r.images >= 0) j::integer(out, r.images);
    else out.raw(std::string_view("null"));
    j::key(out, "audio_seconds");
    if (r.audio_seconds >= 0) j::number(out, r.audio_seconds);
    else out.raw(std::string_view("null"));
    j::key(out, "characters");
    if (r.characters >= 0) j::integer(out, r.characters);
    else out.raw(std::string_view("null"));
    j::key(out, "usage_source");
    j::string(out, r.usage_source.view());
    j::key(out, "cost_usd");
    if (r.cost_usd >= 0) j::number(out, r.cost_usd);
    else out.raw(std::string_view("null"));  // the model has no pricing
    j::key(out, "duration_ms");
    j::millis(out, nanoseconds(r.duration_ns));
    j::key(out, "ttft_ms");
    if (r.has_ttft) j::millis(out, nanoseconds(r.ttft_ns));
    else out.raw(std::string_view("null"));
    j::key(out, "bytes_out");
    j::integer(out, static_cast<std::int64_t>(r.bytes_out));
    j::key(out, "attempts");
    j::integer(out, r.attempts);
    strOrNull("fallback", r.fallback.size > 0, r.fallback);
    for (std::size_t i = 0; i < kRecordFieldCount; ++i) {
      const auto f = static_cast<RecordField>(i);
      j::key(out, recordFieldName(f));
      if (!r.record_field[i].size) out.raw(std::string_view("null"));
      else if (recordFieldNumeric(f)) out.raw(text(r.record_field[i]));
      else j::string(out, text(r.record_field[i]));
    }
    j::key(out, "trace_id");
    if (r.has_trace) {
      char hex[32];
      toHex(r.trace_id.data(), r.trace_id.size(), hex);
      j::string(out, std::string_view(hex, 32));
    } else {
      out.raw(std::string_view("null"));
    }
    out.raw(std::string_view("}\n"));
  }
  return count;
}

}  // namespace tahua
