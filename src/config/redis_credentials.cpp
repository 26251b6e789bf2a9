// The credentials written beside a Redis' address (store.redis, its sentinels, a usage
// sink, a region peer): `username` and `password_env`, so that the password comes from
// the environment (a Kubernetes Secret) and the config (a ConfigMap) holds none.
#include <cstdlib>

#include "config/loader_detail.h"
#include "core/redis_url.h"

namespace tahua::config_detail {

RedisCredentials Loader::redisCredentials(const YAML::Node& n, const std::string& p, std::string_view url,
                                          std::string_view unset) {
  RedisCredentials c;
  const YAML::Node user = n["username"], env = n["password_env"];
  if (!user && !env) return c;
  if (!env) fail(user, p + ".username", "needs password_env (Redis authenticates a user by a password)");
  RedisEndpoint in_url;
  if (!url.empty() && !parseRedisUrl(url, in_url) && (!in_url.password.empty() || !in_url.username.empty()))
    fail(env, p + ".password_env", "the url has credentials already: give them in the url or as username/password_env, not both");
  c.password_env = nonEmpty(env, p + ".password_env");
  if (user) c.username = nonEmpty(user, p + ".username");
  // As for api_key_env: a warning, and that server unused (never asked without its password).
  if (const char* value = std::getenv(c.password_env.c_str()); value && *value) c.password = value;
  else warnings_.push_back(p + ".password_env: environment variable " + c.password_env + " is not set (it is read at start); " + std::string(unset));
  return c;
}

}  // namespace tahua::config_detail
