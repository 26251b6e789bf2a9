// The API keys a worker checks requests against, by the SHA-256 of the key: a request's
// key is hashed once and looked up here, so the check costs one hash and one probe and
// the table never holds a key itself. Each worker has its own table (no sharing, no
// lock); it keeps the directory it points into alive.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "config/config.h"
#include "core/sha256.h"
#include "tenants/tenant_directory.h"

namespace tahua {

class KeyTable {
 public:
  explicit KeyTable(TenantDirectoryPtr directory);

  // The key whose SHA-256 is `digest`, or null. Digests are compared in constant time
  // (CRYPTO_memcmp): what the probe's timing could reveal is the digest of a guess,
  // which says nothing about any real key.
  const ApiKeyConfig* find(const Sha256& digest) const;
  const TenantConfig* tenant(std::string_view name) const;
  // The key named `name` (an auth plugin names the key a request counts against), or null.
  const ApiKeyConfig* keyNamed(std::string_view name) const;
  std::size_t size() const { return by_digest_.size(); }

 private:
  struct DigestHash {
    std::size_t operator()(const Sha256& d) const noexcept;  // its first 8 bytes: already uniform
  };
  struct DigestEqual {
    bool operator()(const Sha256& a, const Sha256& b) const noexcept;
  };
  std::unordered_map<Sha256, const ApiKeyConfig*, DigestHash, DigestEqual> by_digest_;
  std::unordered_map<std::string_view, const TenantConfig*> tenants_;
  std::unordered_map<std::string_view, const ApiKeyConfig*> keys_by_name_;
  TenantDirectoryPtr directory_;  // what the pointers point into
};

}  // namespace tahua
