// Where a Redis server is, from a redis:// URL: the config loader checks the URLs it is
// given (store, cache, usage sinks, regions) and the Redis clients connect to them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tahua {

struct RedisEndpoint {
  std::string host = "127.0.0.1";
  std::uint16_t port = 6379;
  std::string password;  // AUTH, if set (secret: never logged)
  std::string username;  // ACL user (Redis 6+), with password
  int db = 0;
};

// "redis://[[user]:password@]host[:port][/db]" -> endpoint; an error text if malformed.
std::optional<std::string> parseRedisUrl(std::string_view url, RedisEndpoint& out);

}  // namespace tahua
