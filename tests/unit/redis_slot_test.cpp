// Redis Cluster's key slots (the values Redis' own CLUSTER KEYSLOT gives) and the URL
// parsing of the store's endpoint.
#include <gtest/gtest.h>

#include "core/redis_url.h"
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

}  // namespace redis_slot_test
}  // namespace tahua
