// A worker's tokens already verified, by the SHA-256 of the token (the token itself is
// never kept), least recently used dropped first past `capacity`. A token seen again
// then costs a hash and a probe, as an API key does, instead of a signature check. An
// entry is good until its token's exp (plus the clock skew), and only while the key
// that verified it is still in its issuer's set: the owner checks that by the set's
// generation (one atomic load) and, when it moved, by looking the key up once.
// One per worker: no lock.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>

#include "config/config.h"
#include "core/sha256.h"
#include "request/request_context.h"

namespace tahua::jwt {

class Key;

struct VerifiedToken {
  std::shared_ptr<const CallerIdentity> caller;
  const TenantConfig* tenant = nullptr;
  std::int64_t valid_until_s = 0;  // exp + clock skew
  const void* issuer = nullptr;    // the link's issuer entry it was verified for
  const Key* key = nullptr;        // compared by address, never used
  std::uint64_t generation = 0;    // of the issuer's key set when last confirmed
};

class VerifiedTokens {
 public:
  explicit VerifiedTokens(std::size_t capacity) : capacity_(capacity ? capacity : 1) {}

  // The entry of a token, while it is still good at `now_s` (an expired one is dropped).
  VerifiedToken* find(const Sha256& digest, std::int64_t now_s) {
    auto it = index_.find(digest);
    if (it == index_.end()) return nullptr;
    if (now_s >= it->second->second.valid_until_s) {
      order_.erase(it->second);
      index_.erase(it);
      return nullptr;
    }
    order_.splice(order_.begin(), order_, it->second);  // most recently used first
    return &it->second->second;
  }
  void erase(const Sha256& digest) {
    auto it = index_.find(digest);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }
  void put(const Sha256& digest, VerifiedToken entry) {
    erase(digest);
    if (index_.size() >= capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(digest, std::move(entry));
    index_.emplace(digest, order_.begin());
  }
  std::size_t size() const { return index_.size(); }

 private:
  struct DigestHash {
    std::size_t operator()(const Sha256& d) const noexcept {
      std::size_t h = 0;
      for (std::size_t i = 0; i < sizeof h; ++i) h = h << 8 | d[i];  // already uniform
      return h;
    }
  };
  using Order = std::list<std::pair<Sha256, VerifiedToken>>;
  std::size_t capacity_;
  Order order_;
  std::unordered_map<Sha256, Order::iterator, DigestHash> index_;
};

}  // namespace tahua::jwt
