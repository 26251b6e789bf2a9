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
  // The variable password_env names, unset at start: the server is never connected to
  // (a command fails at once, as if it were down), rather than asked without a password.
  std::string password_unset;
};

// "redis://[[user]:password@]host[:port][/db]" -> endpoint; an error text if malformed.
std::optional<std::string> parseRedisUrl(std::string_view url, RedisEndpoint& out);

// Credentials configured beside a URL or a host:port (`username`, `password_env`), so
// that the password need not be written into the config: they replace the URL's.
struct RedisCredentials {
  std::string username;
  std::string password_env;  // the variable's name ("": none configured)
  std::string password;      // its value, read when the config is loaded (secret: never logged)
  bool operator==(const RedisCredentials&) const = default;
};

// The configured credentials, if any, in place of the endpoint's.
void useCredentials(const RedisCredentials& credentials, RedisEndpoint& out);

}  // namespace tahua
