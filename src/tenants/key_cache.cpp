#include "tenants/key_cache.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>

namespace tahua {
namespace {

constexpr std::size_t kTagBytes = 16;

// Drawn once per process; never written out, logged or sent.
const std::array<unsigned char, 16>& processSecret() {
  static const std::array<unsigned char, 16> secret = [] {
    std::array<unsigned char, 16> s{};
    if (RAND_bytes(s.data(), static_cast<int>(s.size())) != 1) std::abort();  // no randomness: no safe cache
    return s;
  }();
  return secret;
}

// SipHash-2-4 with a 16-byte output, keyed once per thread; each tag re-initialises the
// context without a key, which restores the keyed state (no key schedule, no parameters).
struct MacContext {
  MacContext() {
    EVP_MAC* mac = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
    ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
    EVP_MAC_free(mac);  // the context keeps its own reference
    std::size_t size = kTagBytes;
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size), OSSL_PARAM_END};
    const auto& secret = processSecret();
    if (!ctx || EVP_MAC_init(ctx, secret.data(), secret.size(), params) != 1 || EVP_MAC_CTX_get_mac_size(ctx) != kTagBytes)
      std::abort();  // OpenSSL without SipHash cannot run this program
  }
  ~MacContext() { EVP_MAC_CTX_free(ctx); }
  EVP_MAC_CTX* ctx = nullptr;
};

}  // namespace

KeyCache::KeyCache(std::size_t slots) : mask_(std::bit_ceil(slots < 1 ? std::size_t{1} : slots) - 1) {}

KeyTag KeyCache::tag(std::string_view key) {
  thread_local MacContext mc;
  unsigned char out[kTagBytes];
  std::size_t len = 0;
  if (EVP_MAC_init(mc.ctx, nullptr, 0, nullptr) != 1 ||
      EVP_MAC_update(mc.ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size()) != 1 ||
      EVP_MAC_final(mc.ctx, out, &len, sizeof out) != 1 || len != sizeof out)
    std::abort();  // cannot fail with a keyed context and valid arguments
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
