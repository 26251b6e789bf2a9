#include "telemetry/trace_context.h"

#include <openssl/rand.h>

#include <chrono>
#include <cstring>
#include <random>

namespace tahua {
namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is invalid in traceparent
}

bool parseHex(std::string_view s, std::uint8_t* out) {
  for (std::size_t i = 0; i < s.size(); i += 2) {
    const int hi = hexValue(s[i]), lo = hexValue(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i / 2] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <std::size_t N>
bool allZero(const std::array<std::uint8_t, N>& a) {
  for (auto b : a)
    if (b) return false;
  return true;
}

// xoshiro-style speed is not needed: one 64-bit draw per 8 bytes of id.
std::mt19937_64& generator() {
  thread_local std::mt19937_64 gen = [] {
    std::uint64_t seed[2] = {0, 0};
    if (RAND_bytes(reinterpret_cast<unsigned char*>(seed), sizeof seed) != 1)
      seed[0] = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::seed_seq seq{seed[0], seed[0] >> 32, seed[1], seed[1] >> 32};
    return std::mt19937_64(seq);
  }();
  return gen;
}

}  // namespace

bool TraceContext::valid() const { return !allZero(trace_id); }

void toHex(const std::uint8_t* bytes, std::size_t n, char* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
}

void TraceContext::traceIdHex(char out[32]) const { toHex(trace_id.data(), trace_id.size(), out); }
void TraceContext::spanIdHex(char out[16]) const { toHex(span_id.data(), span_id.size(), out); }

bool parseTraceparent(std::string_view v, TraceContext& out) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55.
  if (v.size() < 55) return false;
  std::uint8_t version = 0;
  if (!parseHex(v.substr(0, 2), &version) || version == 0xff) return false;
  if (version == 0 && v.size() != 55) return false;
  if (version != 0 && v.size() > 55 && v[55] != '-') return false;
  if (v[2] != '-' || v[35] != '-' || v[52] != '-') return false;
  TraceContext t;
  std::uint8_t flags = 0;
  if (!parseHex(v.substr(3, 32), t.trace_id.data()) || !parseHex(v.substr(36, 16), t.parent_id.data()) ||
      !parseHex(v.substr(53, 2), &flags))
    return false;
  if (allZero(t.trace_id) || allZero(t.parent_id)) return false;
  t.sampled = flags & 1;
  out = t;
  return true;
}

void formatTraceparent(const TraceContext& ctx, const std::array<std::uint8_t, 8>& span, char out[55]) {
  out[0] = '0';
  out[1] = '0';
  out[2] = '-';
  toHex(ctx.trace_id.data(), 16, out + 3);
  out[35] = '-';
  toHex(span.data(), 8, out + 36);
  out[52] = '-';
  out[53] = '0';
  out[54] = ctx.sampled ? '1' : '0';
}

void randomBytes(std::uint8_t* out, std::size_t n) {
  auto& gen = generator();
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t r = gen();
    std::memcpy(out + i, &r, std::min<std::size_t>(8, n - i));
  }
}

void uuidV7(char out[36]) {
  std::uint8_t b[16];
  const auto ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  for (int i = 0; i < 6; ++i) b[i] = static_cast<std::uint8_t>(ms >> (40 - 8 * i));
  randomBytes(b + 6, 10);
  b[6] = static_cast<std::uint8_t>(0x70 | (b[6] & 0x0f));  // version 7
  b[8] = static_cast<std::uint8_t>(0x80 | (b[8] & 0x3f));  // variant 10
  // 8-4-4-4-12 hex digits: the groups' bytes written where they go (no pass to place the
  // dashes: this runs once per usage record).
  toHex(b, 4, out);
  out[8] = '-';
  toHex(b + 4, 2, out + 9);
  out[13] = '-';
  toHex(b + 6, 2, out + 14);
  out[18] = '-';
  toHex(b + 8, 2, out + 19);
  out[23] = '-';
  toHex(b + 10, 6, out + 24);
}

bool tracestatePassable(std::string_view v) { return !v.empty() && v.size() <= 512 && v.find_first_of("\r\n") == std::string_view::npos; }

}  // namespace tahua
