// The per-worker cache of verified API keys (tenants/key_cache.h) and the table's lookup
// of a presented key through it (tenants/key_table.h): hits, misses, the second half of
// the tag, the bound, and a directory without the key (a revocation).
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "config/config.h"
#include "core/sha256.h"
#include "tenants/key_cache.h"
#include "tenants/key_table.h"
#include "tenants/tenant_directory.h"

namespace tahua {
namespace key_cache_test {  // named, not anonymous: the test files compile in batches

TEST(KeyCache, TagsAreStableDistinctAndNotTheKey) {
  const KeyTag a = KeyCache::tag("sk-a");
  EXPECT_EQ(KeyCache::tag("sk-a"), a);
  EXPECT_NE(KeyCache::tag("sk-b"), a);
  EXPECT_NE(KeyCache::tag("sk-a "), a);
  EXPECT_NE(KeyCache::tag(""), a);
  EXPECT_NE(a.lo, a.hi);
  // Keyed: not a function of the key alone that a client could compute (no fixed value
  // to check against), but at least not the key's bytes nor its SHA-256.
  const Sha256 d = sha256("sk-a");
  EXPECT_NE(std::memcmp(&a, d.data(), sizeof a), 0);
  std::set<std::uint64_t> los;
  for (int i = 0; i < 1000; ++i) los.insert(KeyCache::tag("sk-" + std::to_string(i)).lo);
  EXPECT_EQ(los.size(), 1000u);
}

TEST(KeyCache, HitsOnlyOnAllOfTheTag) {
  ApiKeyConfig ka, kb;
  KeyCache cache;
  const KeyTag a = KeyCache::tag("sk-a");
  EXPECT_EQ(cache.find(a), nullptr);  // empty: nothing allocated, a miss
  cache.insert(a, &ka);
  EXPECT_EQ(cache.find(a), &ka);
  EXPECT_EQ(cache.find(KeyCache::tag("sk-b")), nullptr);
  // Same slot and same low half, another high half: the second check refuses it.
  EXPECT_EQ(cache.find(KeyTag{a.lo, a.hi ^ 1}), nullptr);
  EXPECT_EQ(cache.find(KeyTag{a.lo ^ (std::uint64_t{1} << 40), a.hi}), nullptr);  // same slot, other low half
  // A key whose tag shares the slot replaces the entry; the first is then a miss.
  const KeyTag b{a.lo + cache.slots(), a.hi + 7};
  cache.insert(b, &kb);
  EXPECT_EQ(cache.find(b), &kb);
  EXPECT_EQ(cache.find(a), nullptr);
  cache.insert(a, nullptr);  // nothing found: nothing cached
  EXPECT_EQ(cache.find(b), &kb);
  cache.clear();
  EXPECT_EQ(cache.find(b), nullptr);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(KeyCache, IsBounded) {
  EXPECT_EQ(KeyCache().slots(), KeyCache::kDefaultSlots);
  EXPECT_EQ(KeyCache(5).slots(), 8u);
  EXPECT_EQ(KeyCache(0).slots(), 1u);
  std::vector<ApiKeyConfig> keys(10000);
  KeyCache cache(64);
  for (std::size_t i = 0; i < keys.size(); ++i) cache.insert(KeyCache::tag("sk-" + std::to_string(i)), &keys[i]);
  EXPECT_LE(cache.size(), 64u);
  EXPECT_GT(cache.size(), 32u);
  // The last one inserted is there; whatever is found is the key of that tag.
  EXPECT_EQ(cache.find(KeyCache::tag("sk-9999")), &keys[9999]);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (const ApiKeyConfig* k = cache.find(KeyCache::tag("sk-" + std::to_string(i)))) {
      EXPECT_EQ(k, &keys[i]);
    }
  }
}

ConfigPtr load(const std::string& keys) {
  const std::string yaml = R"(
listeners: [{port: 0}]
providers: [{name: mock, type: mock}]
models: [{name: m1, provider: mock}]
tenants: [{name: a}]
keys:
)" + keys;
  auto r = loadConfigString(yaml, "t.yaml");
  EXPECT_TRUE(r.config) << r.error;
  return r.config;
}

TenantDirectoryPtr directory(const ConfigPtr& cfg) {
  std::vector<std::string> notes;
  return buildTenantDirectory(*cfg, {}, {}, notes);
}

std::string key(const char* name, const char* secret) {
  return std::string("  - {name: ") + name + ", tenant: a, sha256: " + toHex(sha256(secret)) + "}\n";
}

TEST(KeyTable, APresentedKeyIsFoundOnceBySha256ThenThroughTheCache) {
  auto cfg = load(key("ka", "sk-a") + key("kb", "sk-b"));
  KeyTable table(directory(cfg));
  EXPECT_EQ(table.cache().size(), 0u);
  const ApiKeyConfig* a = table.findPresented("sk-a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->name, "ka");
  EXPECT_EQ(a, table.find(sha256("sk-a")));
  EXPECT_EQ(table.cache().size(), 1u);
  EXPECT_EQ(table.cache().find(KeyCache::tag("sk-a")), a);  // what a second request hits
  EXPECT_EQ(table.findPresented("sk-a"), a);
  EXPECT_EQ(table.findPresented("sk-b")->name, "kb");
  // Unknown keys are not cached (a guessing client cannot fill it).
  EXPECT_EQ(table.findPresented("sk-c"), nullptr);
  EXPECT_EQ(table.findPresented("sk-c"), nullptr);
  EXPECT_EQ(table.findPresented(""), nullptr);
  EXPECT_EQ(table.cache().size(), 2u);
}

TEST(KeyTable, ARevokedKeyIsNotFoundInTheNextDirectorysTable) {
  auto before = load(key("ka", "sk-a") + key("kb", "sk-b"));
  KeyTable old_table(directory(before));
  ASSERT_TRUE(old_table.findPresented("sk-a"));
  ASSERT_TRUE(old_table.findPresented("sk-a"));  // cached
  // The directory without ka (revoked through the admin API, or dropped from the
  // config): the worker's next chain has a new table, whose cache starts empty.
  auto after = load(key("kb", "sk-b"));
  KeyTable new_table(directory(after));
  EXPECT_EQ(new_table.cache().size(), 0u);
  EXPECT_EQ(new_table.findPresented("sk-a"), nullptr);
  EXPECT_EQ(new_table.findPresented("sk-a"), nullptr);
  const ApiKeyConfig* b = new_table.findPresented("sk-b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b, new_table.find(sha256("sk-b")));  // the new directory's, not the old one's
  EXPECT_NE(b, old_table.findPresented("sk-b"));
}

}  // namespace key_cache_test
}  // namespace tahua
