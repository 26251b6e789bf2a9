// Redis Cluster's key slots (the values Redis' own CLUSTER KEYSLOT gives), the URL
// parsing of the store's endpoint, and a worker's leases found by their keys.
#include <gtest/gtest.h>

#include "core/redis_url.h"
#include "store/redis/redis_detail.h"
#include "store/redis/redis_slot.h"

namespace tahua {
namespace redis_slot_test {  // named, not anonymous: eight test files compile as one unit

TEST(RedisSlot, MatchesClusterKeyslot) {
  EXPECT_EQ(redisKeySlot("123456789"), 12739);  // CRC16/XMODEM check value 0x31C3
  EXPECT_EQ(redisKeySlot("foo"), 12182);
  EXPECT_EQ(redisKeySlot(""), 0);
}

TEST(RedisSlot, HashTagDecides) {
  EXPECT_EQ(redisKeySlot("{user1000}.following"), redisKeySlot("{user1000}.followers"));
  EXPECT_EQ(redisKeySlot("{user1000}.following"), redisKeySlot("user1000"));
  EXPECT_EQ(redisKeySlot("tahua:{t:team}:tenant:rpm"), redisKeySlot("tahua:{t:team}:key:k1:tpm"));
  // An empty tag or no closing brace: the whole key.
  EXPECT_EQ(redisHashTag("foo{}{bar}"), "foo{}{bar}");
  EXPECT_EQ(redisHashTag("foo{bar"), "foo{bar");
  EXPECT_EQ(redisHashTag("foo{{bar}}zap"), "{bar");  // the first '{' to the first '}' after it
}

TEST(RedisEndpoint, ParsesUrls) {
  RedisEndpoint e;
  EXPECT_FALSE(parseRedisUrl("redis://user:secret@cache.internal:6380/2", e));
  EXPECT_EQ(e.host, "cache.internal");
  EXPECT_EQ(e.port, 6380);
  EXPECT_EQ(e.username, "user");
  EXPECT_EQ(e.password, "secret");
  EXPECT_EQ(e.db, 2);
  RedisEndpoint x;
  EXPECT_TRUE(parseRedisUrl("rediss://h:1", x));
  EXPECT_TRUE(parseRedisUrl("redis://h:1/notanumber", x));
  EXPECT_TRUE(parseRedisUrl("redis://h:0", x));
}

TEST(RedisLeases, FoundByAddressOnlyWithTheSameText) {
  redis_detail::Leases leases;
  leases.map.emplace("tahua:{t:a}:key:k1:rpm", redis_detail::Lease{});
  leases.map.emplace("tahua:{t:b}:key:k1:rpm", redis_detail::Lease{});
  redis_detail::Lease* a = &leases.map.at("tahua:{t:a}:key:k1:rpm");
  redis_detail::Lease* b = &leases.map.at("tahua:{t:b}:key:k1:rpm");
  std::string buffer = "tahua:{t:a}:key:k1:rpm";  // one address, reused for another key
  EXPECT_EQ(leases.find(buffer), a);
  EXPECT_EQ(leases.find(buffer), a);  // the remembered one
  buffer[9] = 'b';  // {t:a} -> {t:b}
  EXPECT_EQ(leases.find(buffer), b) << "same address and length, other text: looked up";
  buffer = "tahua:{t:c}:key:k1:rpm";
  EXPECT_EQ(leases.find(buffer), nullptr);
  // Erased (the sweep forgets what it remembered first): not found again.
  buffer = "tahua:{t:b}:key:k1:rpm";
  EXPECT_EQ(leases.find(buffer), b);
  leases.forgetRecent();
  leases.map.erase("tahua:{t:b}:key:k1:rpm");
  EXPECT_EQ(leases.find(buffer), nullptr);
  EXPECT_EQ(leases.find(std::string_view("tahua:{t:a}:key:k1:rpm")), a);
}

}  // namespace redis_slot_test
}  // namespace tahua
