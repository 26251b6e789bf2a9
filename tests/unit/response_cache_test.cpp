// The exact cache's pure parts: the canonical key text, the in-process layer's byte
// bound, LRU order and TTL (with a fake clock), purge, the Redis form of an entry, and a
// kept answer re-encoded in the other form (stream <-> whole).
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "cache/response_cache.h"
#include "filters/cache/cache_key.h"
#include "filters/cache/cached_answer_forms.h"

namespace tahua {
namespace response_cache_test {  // named, not anonymous: eight test files compile as one unit

namespace bj = boost::json;

std::string canon(std::string_view json, bool user = false) { return canonicalRequest(bj::parse(json).as_object(), user); }

TEST(CacheKey, KeyOrderWhitespaceAndNumberSpellingDoNotMatter) {
  EXPECT_EQ(canon(R"({"model":"a","temperature":0,"messages":[{"role":"user","content":"hi"}]})"),
            canon(R"({ "messages" : [ {"content":"hi", "role":"user"} ], "temperature":0.0, "model":"b", "stream":true,
                       "stream_options":{"include_usage":true}, "user":"u1" })"));
  EXPECT_EQ(canon(R"({"x":1e2})"), canon(R"({"x":100})"));
  EXPECT_EQ(canon(R"({"x":1e2})"), R"({"x":100})");
  EXPECT_EQ(canon(R"({"b":{"d":1,"c":[2,1]},"a":null})"), R"({"a":null,"b":{"c":[2,1],"d":1}})");
  // Anything else that changes the answer changes the key; an omitted default too.
  EXPECT_NE(canon(R"({"temperature":0,"top_p":1})"), canon(R"({"temperature":0})"));
  EXPECT_NE(canon(R"({"temperature":0,"seed":1})"), canon(R"({"temperature":0,"seed":2})"));
  EXPECT_NE(canon(R"({"x":0.1})"), canon(R"({"x":0.10000000000000002})"));
  // `user` only when configured.
  EXPECT_NE(canon(R"({"user":"a"})", true), canon(R"({"user":"b"})", true));
  EXPECT_EQ(canon(R"({"user":"a"})"), canon(R"({"user":"b"})"));
}

TEST(CacheKey, NamesTenantKeyAndModelForPurges) {
  const std::string k = cacheKey("team-a", "", "gpt", "abc");
  EXPECT_EQ(k.rfind("tahua:cache:t", 0), 0u);
  EXPECT_NE(k, cacheKey("team-b", "", "gpt", "abc"));
  EXPECT_NE(k, cacheKey("team-a", "", "claude", "abc"));
  // The pattern of a tenant matches its keys (glob: '*' any text).
  const std::string p = cacheKeyPattern("team-a", "", "");
  EXPECT_EQ(k.substr(0, p.find('*')), p.substr(0, p.find('*')));
  EXPECT_NE(cacheKey("team-b", "", "gpt", "abc").substr(0, p.find('*')), p.substr(0, p.find('*')));
}

std::shared_ptr<CachedAnswer> answer(std::int64_t expires, std::size_t size, std::string tenant = "t", std::string model = "m") {
  auto a = std::make_shared<CachedAnswer>();
  a->endpoint = static_cast<std::uint8_t>(Endpoint::ChatCompletions);
  a->content_type = "application/json";
  a->body.assign(size, 'x');
  a->expires_ms = expires;
  a->tenant = std::move(tenant);
  a->model = std::move(model);
  return a;
}

TEST(ResponseCacheLayer, BoundedInBytesLeastRecentlyUsedFirstAndExpiring) {
  std::int64_t now = 1'000;
  // 16 shards of 4 KiB: one shard holds three 1 KiB answers. Keys picked in one shard.
  ResponseCache cache(16 * 4096, [&] { return now; });
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 5; ++i) {
    std::string k = "k" + std::to_string(i);
    if (std::hash<std::string_view>{}(k) % 16 == std::hash<std::string_view>{}("k0") % 16) keys.push_back(k);
  }
  for (int i = 0; i < 3; ++i) cache.put(keys[i], answer(10'000, 1024));
  EXPECT_TRUE(cache.get(keys[0])) << "used: now the most recent";
  cache.put(keys[3], answer(10'000, 1024));
  EXPECT_FALSE(cache.get(keys[1])) << "the least recently used went";
  EXPECT_TRUE(cache.get(keys[0]));
  EXPECT_TRUE(cache.get(keys[3]));
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_LE(cache.stats().bytes, 4096u);
  // Larger than a shard: never kept.
  cache.put(keys[4], answer(10'000, 8192));
  EXPECT_FALSE(cache.get(keys[4]));
  now = 10'000;
  EXPECT_FALSE(cache.get(keys[0])) << "expired";
  EXPECT_EQ(cache.stats().expired, 1u);
}

TEST(ResponseCacheLayer, PurgesByTenantKeyAndModel) {
  ResponseCache cache(1 << 20, [] { return 0; });
  cache.put("a1", answer(10, 10, "team-a", "gpt"));
  cache.put("a2", answer(10, 10, "team-a", "claude"));
  cache.put("b1", answer(10, 10, "team-b", "gpt"));
  EXPECT_EQ(cache.purge("team-a", "", "gpt"), 1u);
  EXPECT_FALSE(cache.get("a1"));
  EXPECT_TRUE(cache.get("a2"));
  EXPECT_EQ(cache.purge("", "", "gpt"), 1u);
  EXPECT_FALSE(cache.get("b1"));
  EXPECT_EQ(cache.purge("", "", ""), 1u);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(ResponseCacheLayer, AnEntryRoundTripsThroughItsRedisForm) {
  CachedAnswer a = *answer(123, 0, "team-a", "gpt");
  a.body = "data: {\"x\":1}\n\n";
  a.streamed = true;
  a.include_usage = true;
  a.content_type = "text/event-stream; charset=utf-8";
  a.usage.prompt_tokens = 11;
  a.usage.completion_tokens = 7;
  a.key = "k1";
  auto b = CachedAnswer::parse(a.serialize());
  ASSERT_TRUE(b);
  EXPECT_EQ(b->body, a.body);
  EXPECT_TRUE(b->streamed);
  EXPECT_TRUE(b->include_usage);
  EXPECT_EQ(b->usage.prompt_tokens, 11);
  EXPECT_EQ(b->usage.completion_tokens, 7);
  EXPECT_EQ(b->tenant, "team-a");
  EXPECT_EQ(b->key, "k1");
  EXPECT_EQ(b->expires_ms, 123);
  EXPECT_FALSE(CachedAnswer::parse("garbage"));
  EXPECT_FALSE(CachedAnswer::parse("{\"v\":2}\nbody"));
}

TEST(CachedAnswerForms, AStreamKeptIsAWholeAnswerForAWholeRequestAndBack) {
  CachedAnswer s;
  s.endpoint = static_cast<std::uint8_t>(Endpoint::ChatCompletions);
  s.streamed = true;
  s.content_type = "text/event-stream";
  s.body =
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\n"
      "data: [DONE]\n\n";
  s.include_usage = true;
  InboundOptions options;
  options.model = "alias";
  // The same form: the bytes as kept.
  auto same = cachedAnswerAs(s, Endpoint::ChatCompletions, true, true, options);
  ASSERT_TRUE(same);
  EXPECT_EQ(same->body, s.body);
  // Whole: one chat.completion with the text, the finish reason and the usage.
  auto whole = cachedAnswerAs(s, Endpoint::ChatCompletions, false, false, options);
  ASSERT_TRUE(whole);
  auto o = bj::parse(whole->body).as_object();
  EXPECT_EQ(o.at("object"), "chat.completion");
  EXPECT_EQ(o.at("choices").as_array()[0].at("message").at("content"), "Hello");
  EXPECT_EQ(o.at("choices").as_array()[0].at("finish_reason"), "stop");
  EXPECT_EQ(o.at("usage").at("total_tokens"), 5);
  // And a stream again from the whole one, without the usage chunk when not asked for.
  CachedAnswer w;
  w.endpoint = s.endpoint;
  w.content_type = "application/json";
  w.body = whole->body;
  auto again = cachedAnswerAs(w, Endpoint::ChatCompletions, true, false, options);
  ASSERT_TRUE(again);
  EXPECT_NE(again->body.find("\"content\":\"Hello\""), std::string::npos);
  EXPECT_EQ(again->body.find("\"usage\""), std::string::npos);
  EXPECT_NE(again->body.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(again->content_type.rfind("text/event-stream", 0), 0u);
}

}  // namespace response_cache_test
}  // namespace tahua
