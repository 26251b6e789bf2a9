// Protocol Buffers' wire format, the few pieces an encoder of known messages needs:
// tags, varints, fixed 64-bit values and length-delimited fields, written through a
// raw pointer into room the caller reserved (JsonBuf::reserve). Sizes are computed
// first (a length-delimited field's length precedes it), so nothing is written twice.
// https://protobuf.dev/programming-guides/encoding/
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tahua::protobuf_wire {

enum class WireType : std::uint8_t { Varint = 0, Fixed64 = 1, Len = 2 };

constexpr std::size_t kMaxVarint = 10;

inline std::size_t varintSize(std::uint64_t v) {
  std::size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline char* varint(char* p, std::uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// Field numbers up to 15: a one-byte tag (every field tahua writes).
inline char* tag(char* p, unsigned field, WireType type) {
  *p++ = static_cast<char>(field << 3 | static_cast<unsigned>(type));
  return p;
}

inline char* fixed64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) *p++ = static_cast<char>(v >> (8 * i));  // little-endian
  return p;
}

// A length-delimited field's size: tag, length, `n` bytes.
inline std::size_t lenFieldSize(std::size_t n) { return 1 + varintSize(n) + n; }

// Its tag and length; the `n` bytes follow.
inline char* lenHead(char* p, unsigned field, std::size_t n) { return varint(tag(p, field, WireType::Len), n); }

inline char* bytesField(char* p, unsigned field, const void* data, std::size_t n) {
  p = lenHead(p, field, n);
  if (n) std::memcpy(p, data, n);
  return p + n;
}

}  // namespace tahua::protobuf_wire
