#include "translate/response_ids.h"

#include <openssl/rand.h>

#include <array>
#include <charconv>
#include <ctime>
#include <random>

namespace tahua {
namespace {

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

bool isKey(std::string_view r) {
  if (r.size() != kResponseKeyChars) return false;
  for (char c : r)
    if (kAlphabet.find(c) == std::string_view::npos) return false;
  return true;
}

}  // namespace

constexpr std::size_t kTimeChars = 6;  // 62^6 s: until the year 3777

std::string newResponseId() {
  // The second it was made, base62, then 62^26 > 2^154 random; rejection sampling
  // keeps every random character uniform.
  std::string id = "resp_";
  id.reserve(5 + kResponseKeyChars);
  {
    auto t = static_cast<unsigned long long>(std::time(nullptr));
    char digits[kTimeChars];
    for (std::size_t i = kTimeChars; i-- > 0; t /= 62) digits[i] = kAlphabet[t % 62];
    id.append(digits, kTimeChars);
  }
  std::array<unsigned char, 64> bytes{};
  while (id.size() < 5 + kResponseKeyChars) {
    if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
      // OpenSSL's generator failed (not seen in practice): the OS's is next best.
      std::random_device rd;
      for (auto& b : bytes) b = static_cast<unsigned char>(rd());
    }
    for (unsigned char b : bytes) {
      if (b >= 248) continue;  // 248 = 62 * 4
      id.push_back(kAlphabet[b % 62]);
      if (id.size() == 5 + kResponseKeyChars) break;
    }
  }
  return id;
}

bool responseKeyIsRecent(std::string_view key, long long seconds) {
  if (key.size() < kTimeChars) return true;
  long long t = 0;
  for (std::size_t i = 0; i < kTimeChars; ++i) {
    const auto at = kAlphabet.find(key[i]);
    if (at == std::string_view::npos) return true;
    t = t * 62 + static_cast<long long>(at);
  }
  const long long now = static_cast<long long>(std::time(nullptr));
  return t > now - seconds;  // the future included: not a time tahua wrote (or a clock ahead)
}

std::string_view responseKeyOf(std::string_view response_id) {
  if (response_id.substr(0, 5) != "resp_") return {};
  std::string_view r = response_id.substr(5);
  return isKey(r) ? r : std::string_view{};
}

std::string responseIdFor(std::string_view response_key) {
  std::string id = "resp_";
  id.append(response_key);
  return id;
}

std::string itemIdFor(std::string_view prefix, std::string_view response_key, bool output, std::size_t index) {
  std::string id(prefix);
  id += '_';
  id.append(response_key);
  id += output ? 'o' : 'i';
  id += std::to_string(index);
  return id;
}

std::optional<ItemRef> parseItemId(std::string_view id) {
  const std::size_t us = id.find('_');
  if (us == std::string_view::npos || us == 0 || us > 8) return std::nullopt;
  std::string_view rest = id.substr(us + 1);
  if (rest.size() < kResponseKeyChars + 2) return std::nullopt;
  ItemRef ref;
  ref.response_key = rest.substr(0, kResponseKeyChars);
  if (!isKey(ref.response_key)) return std::nullopt;
  const char side = rest[kResponseKeyChars];
  if (side != 'o' && side != 'i') return std::nullopt;
  ref.output = side == 'o';
  std::string_view digits = rest.substr(kResponseKeyChars + 1);
  if (digits.size() > 6) return std::nullopt;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ref.index);
  if (ec != std::errc{} || p != digits.data() + digits.size()) return std::nullopt;
  return ref;
}

}  // namespace tahua
