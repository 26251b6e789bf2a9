// providers: upstream endpoints, credentials and per-provider resilience settings
// (timeouts, retry, circuit breaker, connection pool).
#include <boost/url/parse.hpp>
#include <cstdlib>
#include <fstream>
#include <set>

#include "config/loader_detail.h"

namespace tahua::config_detail {

constexpr Named<ProviderType> kProviderTypes[] = {
    {ProviderType::OpenAI, "openai"}, {ProviderType::AzureOpenAI, "azure-openai"},
    {ProviderType::Anthropic, "anthropic"}, {ProviderType::Gemini, "gemini"},
    {ProviderType::Bedrock, "bedrock"}, {ProviderType::Mock, "mock"},
};

void Loader::loadProviders(const YAML::Node& n, const YAML::Node& root, Config& cfg) {
  if (!n) fail(root, "providers", "required: at least one provider");
  if (!n.IsSequence() || n.size() == 0) fail(n, "providers", "expected a non-empty list");
  std::set<std::string> names;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string p = "providers[" + std::to_string(i) + "]";
    const YAML::Node& y = n[i];
    checkKeys(y, p, {"name", "type", "base_url", "api_key", "api_key_env", "headers", "timeouts", "retry", "circuit_breaker",
                     "tls", "pool", "mock", "anthropic_version", "default_max_tokens", "api_version", "stream_usage", "aws"});
    ProviderConfig pc;
    if (!y["name"]) fail(y, p + ".name", "required");
    pc.name = nonEmpty(y["name"], p + ".name");
    if (!names.insert(pc.name).second) fail(y["name"], p + ".name", "duplicate provider name \"" + pc.name + "\"");
    const std::string types = choices(kProviderTypes, " | ");
    if (!y["type"]) fail(y, p + ".type", "required (" + types + ")");
    auto type = str(y["type"], p + ".type");
    const auto parsed_type = valueOf(kProviderTypes, type);
    if (!parsed_type) fail(y["type"], p + ".type", "unknown provider type \"" + type + "\" (" + types + ")");
    pc.type = *parsed_type;

    // Vendor-only settings are rejected on other types: a typo'd type must not
    // silently ignore them.
    const auto onlyFor = [&](const char* key, std::initializer_list<ProviderType> types) {
      if (!y[key]) return false;
      for (auto t : types)
        if (t == pc.type) return true;
      fail(y[key], p + "." + key, "not used by type " + type);
      return false;
    };
    if (onlyFor("anthropic_version", {ProviderType::Anthropic})) pc.anthropic_version = nonEmpty(y["anthropic_version"], p + ".anthropic_version");
    if (onlyFor("default_max_tokens", {ProviderType::Anthropic, ProviderType::Bedrock}))
      pc.default_max_tokens = integer(y["default_max_tokens"], p + ".default_max_tokens", 1, 10'000'000);
    if (onlyFor("api_version", {ProviderType::AzureOpenAI})) pc.api_version = nonEmpty(y["api_version"], p + ".api_version");
    if (pc.type == ProviderType::AzureOpenAI && pc.api_version.empty())
      fail(y, p + ".api_version", "required for type azure-openai (e.g. \"2024-10-21\")");
    if (pc.api_version.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") != std::string::npos)
      fail(y["api_version"], p + ".api_version", "unexpected characters");
    if (onlyFor("stream_usage", {ProviderType::OpenAI, ProviderType::AzureOpenAI, ProviderType::Mock}))
      pc.stream_usage = boolean(y["stream_usage"], p + ".stream_usage");
    if (onlyFor("aws", {ProviderType::Bedrock})) loadAws(y["aws"], p + ".aws", pc);
    if (pc.type == ProviderType::Bedrock && !y["aws"]) fail(y, p + ".aws", "required for type bedrock (region and credentials)");

    if (pc.type == ProviderType::Mock) {
      if (y["base_url"]) fail(y["base_url"], p + ".base_url", "not used by type mock");
    } else if (y["base_url"]) {
      parseBaseUrl(y["base_url"], p + ".base_url", pc);
    } else if (pc.type == ProviderType::OpenAI || pc.type == ProviderType::AzureOpenAI) {
      fail(y, p + ".base_url", "required for type " + type);
    } else {
      // The vendor's public endpoint.
      YAML::Node def(pc.type == ProviderType::Anthropic ? std::string("https://api.anthropic.com/v1")
                     : pc.type == ProviderType::Gemini  ? std::string("https://generativelanguage.googleapis.com/v1beta")
                                                        : "https://bedrock-runtime." + pc.aws.region + ".amazonaws.com");
      parseBaseUrl(def, p + ".base_url", pc);
    }
    if (pc.type == ProviderType::Bedrock && (y["api_key"] || y["api_key_env"]))
      fail(y["api_key"] ? y["api_key"] : y["api_key_env"], p + ".api_key", "bedrock uses aws credentials, not an api key");
    if (y["api_key"] && y["api_key_env"]) fail(y["api_key"], p + ".api_key", "set api_key or api_key_env, not both");
    if (auto v = y["api_key"]) pc.api_key = str(v, p + ".api_key");
    if (auto v = y["api_key_env"]) {
      pc.api_key_env = nonEmpty(v, p + ".api_key_env");
      const char* env = std::getenv(pc.api_key_env.c_str());
      if (env && *env) {
        pc.api_key = env;
      } else {
        pc.usable = false;
        warnings_.push_back("provider \"" + pc.name + "\": environment variable " + pc.api_key_env +
                            " is not set; its models answer 503 until it is");
      }
    }
    if (auto h = y["headers"]) {
      if (!h.IsMap()) fail(h, p + ".headers", "expected a mapping of header name to value");
      for (const auto& kv : h) {
        auto name = str(kv.first, p + ".headers");
        auto value = str(kv.second, p + ".headers." + name);
        if (name.empty() || name.find_first_of(" \t\r\n:") != std::string::npos)
          fail(kv.first, p + ".headers", "invalid header name \"" + name + "\"");
        if (value.find_first_of("\r\n") != std::string::npos)
          fail(kv.second, p + ".headers." + name, "header value must not contain line breaks");
        pc.headers.emplace_back(std::move(name), std::move(value));
      }
    }
    pc.timeouts = cfg.default_timeouts;
    if (auto t = y["timeouts"]) pc.timeouts = timeoutOverrides(t, p + ".timeouts").apply(pc.timeouts);
    if (auto r = y["retry"]) {
      const std::string rp = p + ".retry";
      checkKeys(r, rp, {"attempts", "on_status", "backoff", "max_backoff"});
      if (auto v = r["attempts"]) pc.retry.attempts = static_cast<int>(integer(v, rp + ".attempts", 1, 10));
      if (auto v = r["on_status"]) {
        if (!v.IsSequence()) fail(v, rp + ".on_status", "expected a list of HTTP statuses");
        pc.retry.on_status.clear();
        for (std::size_t k = 0; k < v.size(); ++k)
          pc.retry.on_status.push_back(static_cast<int>(integer(v[k], rp + ".on_status[" + std::to_string(k) + "]", 400, 599)));
      }
      if (auto v = r["backoff"]) pc.retry.backoff = duration(v, rp + ".backoff");
      if (auto v = r["max_backoff"]) pc.retry.max_backoff = duration(v, rp + ".max_backoff");
    }
    if (auto c = y["circuit_breaker"]) {
      const std::string cp = p + ".circuit_breaker";
      checkKeys(c, cp, {"enabled", "window", "window_duration", "min_calls", "failure_rate", "slow_call", "slow_call_rate",
                        "open_for", "half_open_probes"});
      auto& cb = pc.circuit_breaker;
      cb.enabled = true;  // a circuit_breaker section turns it on unless enabled: false
      if (auto v = c["enabled"]) cb.enabled = boolean(v, cp + ".enabled");
      if (auto v = c["window"]) cb.window = static_cast<int>(integer(v, cp + ".window", 1, 10000));
      if (auto v = c["min_calls"]) cb.min_calls = static_cast<int>(integer(v, cp + ".min_calls", 1, 10000));
      if (auto v = c["failure_rate"]) cb.failure_rate = static_cast<int>(integer(v, cp + ".failure_rate", 1, 100));
      if (auto v = c["slow_call"]) cb.slow_call = duration(v, cp + ".slow_call");
      if (auto v = c["slow_call_rate"]) cb.slow_call_rate = static_cast<int>(integer(v, cp + ".slow_call_rate", 1, 100));
      if (auto v = c["open_for"]) cb.open_for = duration(v, cp + ".open_for", Millis(1));
      if (auto v = c["half_open_probes"])
        cb.half_open_probes = static_cast<int>(integer(v, cp + ".half_open_probes", 1, 1000));
      if (auto v = c["window_duration"]) cb.window_duration = duration(v, cp + ".window_duration");
      if (cb.window_duration.count() == 0 && cb.min_calls > cb.window) fail(c, cp + ".min_calls", "must not exceed window");
    }
    if (auto t = y["tls"]) {
      checkKeys(t, p + ".tls", {"verify", "ca_file"});
      if (auto v = t["verify"]) pc.tls_verify = boolean(v, p + ".tls.verify");
      if (auto v = t["ca_file"]) {
        pc.ca_file = nonEmpty(v, p + ".tls.ca_file");
        if (!std::ifstream(pc.ca_file)) fail(v, p + ".tls.ca_file", "cannot read file \"" + pc.ca_file + "\"");
      }
    }
    if (auto t = y["pool"]) {
      checkKeys(t, p + ".pool", {"max_idle", "idle_timeout"});
      if (auto v = t["max_idle"]) pc.pool_max_idle = integer(v, p + ".pool.max_idle", 0, 100000);
      if (auto v = t["idle_timeout"]) pc.pool_idle_timeout = duration(v, p + ".pool.idle_timeout", Millis(1));
    }
    if (auto m = y["mock"]) {
      if (pc.type != ProviderType::Mock) fail(m, p + ".mock", "only for type mock");
      checkKeys(m, p + ".mock", {"completion_tokens", "chunk_delay", "embedding_dimensions"});
      if (auto v = m["completion_tokens"])
        pc.mock.completion_tokens = static_cast<int>(integer(v, p + ".mock.completion_tokens", 1, 100000));
      if (auto v = m["chunk_delay"]) pc.mock.chunk_delay = duration(v, p + ".mock.chunk_delay");
      if (auto v = m["embedding_dimensions"])
        pc.mock.embedding_dimensions = static_cast<int>(integer(v, p + ".mock.embedding_dimensions", 1, 65536));
    }
    cfg.providers.push_back(std::move(pc));
  }
}

void Loader::loadAws(const YAML::Node& a, const std::string& ap, ProviderConfig& pc) {
  checkKeys(a, ap, {"region", "access_key_id", "access_key_id_env", "secret_access_key", "secret_access_key_env",
                    "session_token", "session_token_env"});
  if (!a["region"]) fail(a, ap + ".region", "required");
  pc.aws.region = nonEmpty(a["region"], ap + ".region");
  if (pc.aws.region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
    fail(a["region"], ap + ".region", "not an AWS region name");
  // Each credential comes literally or from an environment variable (the usual
  // AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN).
  const auto secret = [&](const char* key, const char* env_key, const char* default_env, bool required, std::string& out) {
    if (a[key] && a[env_key]) fail(a[key], ap + "." + key, std::string("set ") + key + " or " + env_key + ", not both");
    if (a[key]) {
      out = nonEmpty(a[key], ap + "." + key);
      return;
    }
    std::string env = a[env_key] ? nonEmpty(a[env_key], ap + "." + env_key) : std::string(default_env);
    if (const char* v = std::getenv(env.c_str()); v && *v) {
      out = v;
    } else if (required) {
      pc.usable = false;
      warnings_.push_back("provider \"" + pc.name + "\": environment variable " + env +
                          " is not set; its models answer 503 until it is");
    }
  };
  secret("access_key_id", "access_key_id_env", "AWS_ACCESS_KEY_ID", true, pc.aws.access_key_id);
  secret("secret_access_key", "secret_access_key_env", "AWS_SECRET_ACCESS_KEY", true, pc.aws.secret_access_key);
  secret("session_token", "session_token_env", "AWS_SESSION_TOKEN", false, pc.aws.session_token);
}

void Loader::parseBaseUrl(const YAML::Node& node, const std::string& path, ProviderConfig& pc) {
  pc.base_url = nonEmpty(node, path);
  auto parsed = boost::urls::parse_absolute_uri(pc.base_url);
  if (!parsed) fail(node, path, "not an absolute URL: \"" + pc.base_url + "\"");
  auto scheme = std::string(parsed->scheme());
  if (scheme != "http" && scheme != "https") fail(node, path, "scheme must be http or https");
  pc.https = scheme == "https";
  pc.host = std::string(parsed->host());
  if (pc.host.empty()) fail(node, path, "missing host");
  if (parsed->has_userinfo()) fail(node, path, "credentials in the URL are not allowed; use api_key_env");
  if (parsed->has_query() || parsed->has_fragment()) fail(node, path, "must not have a query or fragment");
  if (pc.host.size() > 2 && pc.host.front() == '[') pc.host = pc.host.substr(1, pc.host.size() - 2);
  pc.port = pc.https ? 443 : 80;
  if (parsed->has_port()) {
    auto port = parsed->port_number();
    if (port == 0) fail(node, path, "invalid port");
    pc.port = port;
  }
  pc.base_path = std::string(parsed->encoded_path());
  while (!pc.base_path.empty() && pc.base_path.back() == '/') pc.base_path.pop_back();
}

}  // namespace tahua::config_detail

namespace tahua {

std::string_view providerTypeName(ProviderType t) { return config_detail::nameOf(config_detail::kProviderTypes, t); }

}  // namespace tahua
