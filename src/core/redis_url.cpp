#include "core/redis_url.h"

#include <boost/url/parse.hpp>
#include <charconv>

namespace tahua {

std::optional<std::string> parseRedisUrl(std::string_view url, RedisEndpoint& out) {
  auto parsed = boost::urls::parse_uri(url);
  if (!parsed) return "not a URL (expected redis://[[user]:password@]host[:port][/db])";
  const auto& u = *parsed;
  if (u.scheme() != "redis") return "the scheme must be redis:// (TLS to Redis is not supported yet)";
  if (u.host().empty()) return "a host is required";
  out.host = std::string(u.host_address());
  if (u.has_port()) {
    if (u.port_number() == 0) return "the port must be 1-65535";
    out.port = u.port_number();
  }
  if (u.has_userinfo()) {
    out.username = std::string(u.user());
    out.password = std::string(u.password());
  }
  std::string_view path = u.encoded_path();
  if (!path.empty() && path != "/") {
    path.remove_prefix(1);
    int db = 0;
    auto [p, ec] = std::from_chars(path.data(), path.data() + path.size(), db);
    if (ec != std::errc{} || p != path.data() + path.size() || db < 0 || db > 1'000'000) return "the path must be a database number, e.g. /0";
    out.db = db;
  }
  return std::nullopt;
}

void useCredentials(const RedisCredentials& credentials, RedisEndpoint& out) {
  if (credentials.password_env.empty()) return;
  out.username = credentials.username;
  out.password = credentials.password;
  out.password_unset = credentials.password.empty() ? credentials.password_env : std::string();
}

}  // namespace tahua
