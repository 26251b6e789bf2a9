// Redis Cluster's key -> hash slot mapping: CRC16/XMODEM of the key (or of its hash tag,
// the part between the first '{' and the next '}' when that is not empty), mod 16384.
// Counter names carry a tenant's or a model's tag (limits/limit_plan.h), so one
// tenant's counters share a slot and one script can touch them all.
#pragma once

#include <boost/crc.hpp>
#include <cstdint>
#include <string_view>

namespace tahua {

constexpr std::uint16_t kRedisSlots = 16384;

inline std::string_view redisHashTag(std::string_view key) {
  const auto open = key.find('{');
  if (open == std::string_view::npos) return key;
  const auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

inline std::uint16_t redisKeySlot(std::string_view key) {
  // CRC-16/XMODEM: polynomial 0x1021, initial 0, no reflection, no final xor.
  boost::crc_optimal<16, 0x1021, 0, 0, false, false> crc;
  const std::string_view tag = redisHashTag(key);
  crc.process_bytes(tag.data(), tag.size());
  return static_cast<std::uint16_t>(crc.checksum() % kRedisSlots);
}

}  // namespace tahua
