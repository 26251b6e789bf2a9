// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header a
// request arrives with or the gateway starts, and the ids of its spans. Plain data: the
// tracing filter fills it, the access log and usage records read it.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace tahua {

struct TraceContext {
  std::array<std::uint8_t, 16> trace_id{};  // all zero: no trace
  std::array<std::uint8_t, 8> span_id{};     // the gateway's server span
  std::array<std::uint8_t, 8> parent_id{};   // the caller's span (zero: the gateway started the trace)
  bool sampled = false;

  bool valid() const;
  // 32 and 16 lowercase hex digits (into `out`, which has room).
  void traceIdHex(char out[32]) const;
  void spanIdHex(char out[16]) const;
};

// A caller's tracestate that may be passed on: at most the spec's recommended 512
// bytes, one header line.
bool tracestatePassable(std::string_view value);

// Parses a traceparent value. Version 00 exactly as the spec says; a higher version is
// read by its first four fields (forward compatible); ff, all-zero ids, uppercase hex
// or a wrong length are invalid (the gateway then starts a new trace).
bool parseTraceparent(std::string_view value, TraceContext& out);

// "00-<trace id>-<span id>-<flags>" for `span` (55 characters into `out`).
void formatTraceparent(const TraceContext& ctx, const std::array<std::uint8_t, 8>& span, char out[55]);

void toHex(const std::uint8_t* bytes, std::size_t n, char* out);

// Random ids from a per-thread generator seeded from the OS (ids need to be unique and
// unpredictable enough to avoid collisions, not secret).
void randomBytes(std::uint8_t* out, std::size_t n);

// A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits; sorts by time.
// 36 characters into `out`.
void uuidV7(char out[36]);

}  // namespace tahua
