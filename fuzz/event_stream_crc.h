// For the targets that read AWS event streams: rewriting both CRC32s of every message in
// a fuzzed stream, so mutations reach the header and payload parsers instead of dying at
// the checksum check (libFuzzer cannot forge a CRC32 quickly).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/crc.hpp>

namespace tahua::fuzz {

inline std::uint32_t crc32(std::string_view bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

inline std::uint32_t readU32(std::string_view s, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(s[at + i]);
  return v;
}

inline void writeU32(std::string& s, std::size_t at, std::uint32_t v) {
  for (std::size_t i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (24 - 8 * i));
}

// Walks the messages by their (fuzzed) total lengths; stops where one does not fit.
inline void fixEventStreamCrcs(std::string& s) {
  std::size_t pos = 0;
  while (s.size() - pos >= 12) {
    writeU32(s, pos + 8, crc32(std::string_view(s).substr(pos, 8)));
    const std::uint32_t total = readU32(s, pos);
    if (total < 16 || total > s.size() - pos) return;
    writeU32(s, pos + total - 4, crc32(std::string_view(s).substr(pos, total - 4)));
    pos += total;
  }
}

}  // namespace tahua::fuzz
