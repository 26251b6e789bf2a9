// Redis credentials beside the address (username, password_env) for the store, its
// sentinels, a usage sink and a region peer: read from the environment, never both in the
// URL and beside it, an unset variable a warning and that server left alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/redis_url.h"
#include "store/redis/blocking_redis.h"

namespace tahua {
namespace redis_credentials_test {  // named, not anonymous: eight test files compile as one unit

const char* kProviders = R"(
listeners:
  - port: 0
providers:
  - {name: up, type: openai, base_url: "http://127.0.0.1:9/v1/"}
models:
  - {name: m, provider: up}
)";

constexpr const char* kSecret = "redis-secret-7f3a9c";
constexpr const char* kUrlSecret = "url-secret-5e1b2d";

class RedisCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("TAHUA_TEST_REDIS_PASSWORD", kSecret, 1);
    ::unsetenv("TAHUA_TEST_REDIS_UNSET");
  }
  static ConfigLoadResult load(const std::string& yaml) { return loadConfigString(std::string(kProviders) + yaml, "t.yaml"); }
  static std::string error(const std::string& yaml) {
    auto r = load(yaml);
    EXPECT_FALSE(r.config) << yaml;
    EXPECT_EQ(r.error.find(kSecret), std::string::npos) << r.error;
    EXPECT_EQ(r.error.find(kUrlSecret), std::string::npos) << r.error;
    return r.error;
  }
  static void noSecretIn(const ConfigLoadResult& r) {
    for (const auto& w : r.warnings) EXPECT_EQ(w.find(kSecret), std::string::npos) << w;
  }
  // The warnings about password_env (others, such as authentication being off, aside).
  static std::vector<std::string> passwordWarnings(const ConfigLoadResult& r) {
    std::vector<std::string> out;
    for (const auto& w : r.warnings)
      if (w.find("password_env") != std::string::npos) out.push_back(w);
    return out;
  }
};

TEST_F(RedisCredentialsTest, StorePasswordAndUserFromTheEnvironment) {
  auto r = load(R"(store:
  type: redis
  redis: {url: "redis://10.0.0.5:6380/2", username: tahua, password_env: TAHUA_TEST_REDIS_PASSWORD}
)");
  ASSERT_TRUE(r.config) << r.error;
  noSecretIn(r);
  const RedisCredentials& c = r.config->store.redis.auth;
  EXPECT_EQ(c.username, "tahua");
  EXPECT_EQ(c.password_env, "TAHUA_TEST_REDIS_PASSWORD");
  EXPECT_EQ(c.password, kSecret);
  RedisEndpoint ep;
  ASSERT_FALSE(parseRedisUrl(r.config->store.redis.url, ep));
  useCredentials(c, ep);
  EXPECT_EQ(ep.host, "10.0.0.5");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.db, 2);
  EXPECT_EQ(ep.username, "tahua");
  EXPECT_EQ(ep.password, kSecret);
  EXPECT_EQ(ep.password_unset, "");
}

TEST_F(RedisCredentialsTest, APasswordInTheUrlStillWorksAndIsKeptWithoutPasswordEnv) {
  auto r = load(std::string("store:\n  type: redis\n  redis: {url: \"redis://app:") + kUrlSecret + "@h:1\"}\n");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_TRUE(r.config->store.redis.auth.password_env.empty());
  RedisEndpoint ep;
  ASSERT_FALSE(parseRedisUrl(r.config->store.redis.url, ep));
  useCredentials(r.config->store.redis.auth, ep);  // nothing configured: the url's stay
  EXPECT_EQ(ep.username, "app");
  EXPECT_EQ(ep.password, kUrlSecret);
}

TEST_F(RedisCredentialsTest, BothInTheUrlAndBesideItIsAnErrorNamingTheField) {
  // password_env's value: line 11 (7 of kProviders, then store, type, redis), column 19.
  const std::string e = error(std::string("store:\n  type: redis\n  redis:\n    password_env: TAHUA_TEST_REDIS_PASSWORD\n    url: \"redis://:") +
                              kUrlSecret + "@h:1\"\n");
  EXPECT_NE(e.find("t.yaml:11:19: store.redis.password_env: the url has credentials already"), std::string::npos) << e;
  // A user alone in the url counts too: the two would be mixed.
  EXPECT_NE(error("store:\n  type: redis\n  redis: {url: \"redis://app@h:1\", password_env: TAHUA_TEST_REDIS_PASSWORD}\n")
                .find("store.redis.password_env: the url has credentials already"),
            std::string::npos);
}

TEST_F(RedisCredentialsTest, AUsernameNeedsPasswordEnv) {
  EXPECT_NE(error("store:\n  type: redis\n  redis: {url: \"redis://h:1\", username: tahua}\n")
                .find("store.redis.username: needs password_env"),
            std::string::npos);
  EXPECT_NE(error("store:\n  type: redis\n  redis: {url: \"redis://h:1\", password_env: \"\"}\n").find("store.redis.password_env:"),
            std::string::npos);
}

TEST_F(RedisCredentialsTest, AnUnsetVariableIsAWarningAndThatServerIsNeverAsked) {
  auto r = load("store:\n  type: redis\n  redis: {url: \"redis://127.0.0.1:1\", password_env: TAHUA_TEST_REDIS_UNSET}\n");
  ASSERT_TRUE(r.config) << r.error;
  const auto warnings = passwordWarnings(r);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("store.redis.password_env: environment variable TAHUA_TEST_REDIS_UNSET is not set"), std::string::npos)
      << warnings[0];
  RedisEndpoint ep;
  ASSERT_FALSE(parseRedisUrl(r.config->store.redis.url, ep));
  useCredentials(r.config->store.redis.auth, ep);
  EXPECT_EQ(ep.password_unset, "TAHUA_TEST_REDIS_UNSET");
  // Not even a connection (port 1 would refuse it): the reason is the variable.
  BlockingRedis redis(ep, Millis(500));
  std::string why;
  EXPECT_FALSE(redis.call({"PING"}, why));
  EXPECT_EQ(why, "environment variable TAHUA_TEST_REDIS_UNSET (password_env) is not set");
}

TEST_F(RedisCredentialsTest, SentinelHasItsOwn) {
  auto r = load(R"(store:
  type: redis
  redis:
    url: redis://ignored:1
    password_env: TAHUA_TEST_REDIS_PASSWORD
    sentinel: {addresses: ["127.0.0.1:26379"], master: mymaster, username: watcher, password_env: TAHUA_TEST_REDIS_UNSET}
)");
  ASSERT_TRUE(r.config) << r.error;
  const auto& s = r.config->store.redis;
  EXPECT_EQ(s.auth.password, kSecret);
  EXPECT_EQ(s.auth.username, "");
  EXPECT_EQ(s.sentinel_auth.username, "watcher");
  EXPECT_EQ(s.sentinel_auth.password_env, "TAHUA_TEST_REDIS_UNSET");
  EXPECT_EQ(s.sentinel_auth.password, "");
  const auto warnings = passwordWarnings(r);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("store.redis.sentinel.password_env: environment variable TAHUA_TEST_REDIS_UNSET"), std::string::npos);
  EXPECT_NE(error("store:\n  type: redis\n  redis: {sentinel: {addresses: [\"h:26379\"], master: m, username: u}}\n")
                .find("store.redis.sentinel.username: needs password_env"),
            std::string::npos);
}

TEST_F(RedisCredentialsTest, UsageSinkOwnOrTheStores) {
  auto r = load(R"(store:
  type: redis
  redis: {url: "redis://store:6379", username: tahua, password_env: TAHUA_TEST_REDIS_PASSWORD}
usage:
  spill_dir: /tmp/spill
  sinks:
    - {name: same, type: redis_stream}
    - {name: own-user, type: redis_stream, username: usage, password_env: TAHUA_TEST_REDIS_PASSWORD}
    - {name: elsewhere, type: redis_stream, url: "redis://billing:6379", password_env: TAHUA_TEST_REDIS_PASSWORD}
    - {name: open, type: redis_stream, url: "redis://open:6379"}
)");
  ASSERT_TRUE(r.config) << r.error;
  const auto& s = r.config->usage.sinks;
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].url, "redis://store:6379");  // the store's Redis, as the store logs in
  EXPECT_EQ(s[0].auth, r.config->store.redis.auth);
  EXPECT_EQ(s[1].url, "redis://store:6379");  // the store's Redis, another ACL user
  EXPECT_EQ(s[1].auth.username, "usage");
  EXPECT_EQ(s[1].auth.password, kSecret);
  EXPECT_EQ(s[2].url, "redis://billing:6379");
  EXPECT_EQ(s[2].auth.username, "");
  EXPECT_EQ(s[2].auth.password, kSecret);
  EXPECT_TRUE(s[3].auth.password_env.empty());  // its own url: not the store's credentials

  const std::string sinks = "usage:\n  spill_dir: /tmp/spill\n  sinks:\n    - ";
  EXPECT_NE(error(sinks + "{type: redis_stream, url: \"redis://:" + kUrlSecret + "@h:1\", password_env: TAHUA_TEST_REDIS_PASSWORD}\n")
                .find("usage.sinks[0].password_env: the url has credentials already"),
            std::string::npos);
  EXPECT_NE(error(sinks + "{type: file, path: x, password_env: TAHUA_TEST_REDIS_PASSWORD}\n")
                .find("usage.sinks[0].password_env: not a setting of a file sink"),
            std::string::npos);
  EXPECT_NE(error(sinks + "{type: webhook, url: \"http://h/\", username: u}\n").find("usage.sinks[0].username: not a setting of a webhook sink"),
            std::string::npos);
  EXPECT_NE(error(sinks + "{type: redis_stream, url: \"http://h/\"}\n").find("usage.sinks[0].url: the scheme must be redis://"),
            std::string::npos);
  auto unset = load(sinks + "{type: redis_stream, url: \"redis://h:1\", password_env: TAHUA_TEST_REDIS_UNSET}\n");
  ASSERT_TRUE(unset.config) << unset.error;
  const auto warnings = passwordWarnings(unset);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("usage.sinks[0].password_env: environment variable TAHUA_TEST_REDIS_UNSET is not set"), std::string::npos);
}

TEST_F(RedisCredentialsTest, RegionPeer) {
  const std::string store = "store:\n  type: redis\n  redis: {url: \"redis://local:6379\"}\n";
  auto r = load(store + R"(region:
  name: eu
  peers:
    - {name: us, url: "redis://us.example:6379", username: link, password_env: TAHUA_TEST_REDIS_PASSWORD}
)");
  ASSERT_TRUE(r.config) << r.error;
  const auto& peer = r.config->region.peers.at(0);
  EXPECT_EQ(peer.auth.username, "link");
  EXPECT_EQ(peer.auth.password, kSecret);
  EXPECT_NE(error(store + "region:\n  name: eu\n  peers:\n    - {name: us, url: \"redis://:" + kUrlSecret +
                  "@us:6379\", password_env: TAHUA_TEST_REDIS_PASSWORD}\n")
                .find("region.peers[0].password_env: the url has credentials already"),
            std::string::npos);
  EXPECT_NE(error(store + "region:\n  name: eu\n  peers:\n    - {name: us, url: \"redis://us:6379\", passwrd_env: X}\n")
                .find("region.peers[0]"),
            std::string::npos);
}

}  // namespace redis_credentials_test
}  // namespace tahua
