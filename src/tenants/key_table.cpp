#include "tenants/key_table.h"

#include <openssl/crypto.h>

#include <cstring>

namespace tahua {

std::size_t KeyTable::DigestHash::operator()(const Sha256& d) const noexcept {
  std::size_t h = 0;
  std::memcpy(&h, d.data(), sizeof h);
  return h;
}

bool KeyTable::DigestEqual::operator()(const Sha256& a, const Sha256& b) const noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

KeyTable::KeyTable(TenantDirectoryPtr directory) : directory_(std::move(directory)) {
  for (const auto& t : directory_->tenants) tenants_.emplace(t.name, &t);
  by_digest_.reserve(directory_->keys.size());
  keys_by_name_.reserve(directory_->keys.size());
  for (const auto& k : directory_->keys) {
    by_digest_.emplace(k.sha256, &k);
    keys_by_name_.emplace(k.name, &k);
  }
}

const ApiKeyConfig* KeyTable::find(const Sha256& digest) const {
  auto it = by_digest_.find(digest);
  return it == by_digest_.end() ? nullptr : it->second;
}

const ApiKeyConfig* KeyTable::findPresented(std::string_view key) const {
  const KeyTag tag = KeyCache::tag(key);
  if (const ApiKeyConfig* k = cache_.find(tag)) return k;
  const ApiKeyConfig* k = find(sha256(key));
  cache_.insert(tag, k);  // only keys found: an unknown one costs its SHA-256 each time
  return k;
}

const TenantConfig* KeyTable::tenant(std::string_view name) const {
  auto it = tenants_.find(name);
  return it == tenants_.end() ? nullptr : it->second;
}

const ApiKeyConfig* KeyTable::keyNamed(std::string_view name) const {
  auto it = keys_by_name_.find(name);
  return it == keys_by_name_.end() ? nullptr : it->second;
}

}  // namespace tahua
