#include "tenants/key_cache.h"

#include <sodium.h>

#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>

namespace tahua {
namespace {

constexpr std::size_t kTagBytes = crypto_shorthash_siphashx24_BYTES;  // 16
static_assert(kTagBytes == 16);

// Drawn once per process; never written out, logged or sent.
const std::array<unsigned char, crypto_shorthash_siphashx24_KEYBYTES>& processSecret() {
  static const std::array<unsigned char, crypto_shorthash_siphashx24_KEYBYTES> secret = [] {
    if (sodium_init() < 0) std::abort();  // no randomness: no safe cache
    std::array<unsigned char, crypto_shorthash_siphashx24_KEYBYTES> s{};
    randombytes_buf(s.data(), s.size());
    return s;
  }();
  return secret;
}

}  // namespace

KeyCache::KeyCache(std::size_t slots) : mask_(std::bit_ceil(slots < 1 ? std::size_t{1} : slots) - 1) {}

// SipHash-2-4 with a 16-byte output (libsodium's siphashx24): a keyed PRF, so no one
// without the process's secret can make two keys share a tag. OpenSSL's EVP_MAC gave the
// same function for ~1,000 instructions a key (its dispatch, re-initialising the keyed
// context); this is ~200 (docs/benchmarks.md, "Session 31").
KeyTag KeyCache::tag(std::string_view key) {
  static const auto& secret = processSecret();
  unsigned char out[kTagBytes];
  crypto_shorthash_siphashx24(out, reinterpret_cast<const unsigned char*>(key.data()), key.size(), secret.data());
  KeyTag t;
  std::memcpy(&t.lo, out, 8);
  std::memcpy(&t.hi, out + 8, 8);
  return t;
}

const ApiKeyConfig* KeyCache::find(const KeyTag& tag) const {
  if (entries_.empty()) return nullptr;
  const Entry& e = entries_[tag.lo & mask_];
  // Both halves, without a branch between them (an empty slot has a null key).
  return ((e.tag.lo ^ tag.lo) | (e.tag.hi ^ tag.hi)) == 0 ? e.key : nullptr;
}

void KeyCache::insert(const KeyTag& tag, const ApiKeyConfig* key) {
  if (!key) return;
  if (entries_.empty()) entries_.resize(mask_ + 1);
  entries_[tag.lo & mask_] = Entry{tag, key};
}

void KeyCache::clear() { entries_.clear(); }

std::size_t KeyCache::size() const {
  std::size_t n = 0;
  for (const Entry& e : entries_) n += e.key != nullptr;
  return n;
}

}  // namespace tahua
