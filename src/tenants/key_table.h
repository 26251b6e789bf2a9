// The API keys a worker checks requests against, by the SHA-256 of the key: a request's
// key is hashed once and looked up here, so the check costs one hash and one probe and
// the table never holds a key itself. A key found once is then found through the table's
// KeyCache (a keyed hash of the presented key, no SHA-256; see key_cache.h): the cache is
// the table's, so a new directory (a revocation) comes with an empty one. Each worker has
// its own table (no sharing, no lock: findPresented writes the cache); it keeps the
// directory it points into alive.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "config/config.h"
#include "core/sha256.h"
#include "tenants/key_cache.h"
#include "tenants/tenant_directory.h"

namespace tahua {

class KeyTable {
 public:
  explicit KeyTable(TenantDirectoryPtr directory);

  // The key whose SHA-256 is `digest`, or null. Digests are compared in constant time
  // (CRYPTO_memcmp): what the probe's timing could reveal is the digest of a guess,
  // which says nothing about any real key.
  const ApiKeyConfig* find(const Sha256& digest) const;
  // The key presented as `key` (its bytes, as the client sent them), or null: through
  // the cache, else by its SHA-256 (and cached when found). On this worker's thread only.
  const ApiKeyConfig* findPresented(std::string_view key) const;
  const TenantConfig* tenant(std::string_view name) const;
  // The key named `name` (an auth plugin names the key a request counts against), or null.
  const ApiKeyConfig* keyNamed(std::string_view name) const;
  std::size_t size() const { return by_digest_.size(); }
  const KeyCache& cache() const { return cache_; }

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
  mutable KeyCache cache_;        // keys found in this table, by their keyed hash
};

}  // namespace tahua
