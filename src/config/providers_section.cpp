// providers: upstream endpoints, credentials and per-provider resilience settings
// (timeouts, retry, circuit breaker, connection pool).
#include <boost/url/parse.hpp>
#include <cstdlib>
#include <fstream>
#include <algorithm>
#include <set>

#include "config/loader_detail.h"
#include "config/provider_kind.h"

namespace tahua::config_detail {

namespace {

// A vendor's settings (config/provider_kind.h) read through the loader's own node readers.
class YamlProviderOptions final : public ProviderOptions {
 public:
  YamlProviderOptions(Loader& loader, const YAML::Node& map, std::string path)
      : loader_(loader), map_(map), path_(std::move(path)) {}

  bool has(std::string_view key) const override { return static_cast<bool>(node(key)); }
  std::string text(std::string_view key) const override { return loader_.nonEmpty(node(key), field(key)); }
  std::int64_t integer(std::string_view key, std::int64_t min, std::int64_t max) const override {
    return static_cast<std::int64_t>(
        loader_.integer(node(key), field(key), static_cast<std::uint64_t>(min), static_cast<std::uint64_t>(max)));
  }
  bool boolean(std::string_view key) const override { return loader_.boolean(node(key), field(key)); }
  Millis duration(std::string_view key) const override { return loader_.duration(node(key), field(key)); }
  std::unique_ptr<ProviderOptions> section(std::string_view key, std::initializer_list<std::string_view> allowed) const override {
    const YAML::Node n = node(key);
    loader_.checkKeys(n, field(key), allowed);
    return std::make_unique<YamlProviderOptions>(loader_, n, field(key));
  }
  [[noreturn]] void fail(std::string_view key, const std::string& message) const override {
    const YAML::Node n = node(key);
    loader_.fail(n ? n : map_, field(key), message);
  }
  void warn(const std::string& message) const override { loader_.warnings_.push_back(message); }

 private:
  YAML::Node node(std::string_view key) const { return map_[std::string(key)]; }
  std::string field(std::string_view key) const { return path_ + "." + std::string(key); }

  Loader& loader_;
  YAML::Node map_;
  std::string path_;
};

// "openai | azure-openai | ..." for errors.
std::string kindChoices() {
  std::string out;
  for (const ProviderKind* k : providerKinds()) {
    if (!out.empty()) out += " | ";
    out += k->type;
  }
  return out;
}

bool takes(const ProviderKind& kind, std::string_view key) {
  for (auto k : kind.options)
    if (k == key) return true;
  return false;
}

}  // namespace

void Loader::loadProviders(const YAML::Node& n, const YAML::Node& root, Config& cfg) {
  if (!n) fail(root, "providers", "required: at least one provider");
  if (!n.IsSequence() || n.size() == 0) fail(n, "providers", "expected a non-empty list");
  std::set<std::string> names;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string p = "providers[" + std::to_string(i) + "]";
    const YAML::Node& y = n[i];
    // The common keys and every vendor's own (those of other types are refused below).
    std::vector<std::string_view> keys = {"name", "type",  "base_url", "api_key", "api_key_env", "headers",
                                          "timeouts", "retry", "circuit_breaker", "tls", "pool"};
    for (const ProviderKind* k : providerKinds())
      for (auto key : k->options)
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    checkKeys(y, p, keys);
    ProviderConfig pc;
    if (!y["name"]) fail(y, p + ".name", "required");
    pc.name = nonEmpty(y["name"], p + ".name");
    if (!names.insert(pc.name).second) fail(y["name"], p + ".name", "duplicate provider name \"" + pc.name + "\"");
    const std::string types = kindChoices();
    if (!y["type"]) fail(y, p + ".type", "required (" + types + ")");
    auto type = str(y["type"], p + ".type");
    const ProviderKind* kind = findProviderKind(type);
    if (!kind) fail(y["type"], p + ".type", "unknown provider type \"" + type + "\" (" + types + ")");
    pc.type = type;
    pc.kind = kind;

    // Vendor-only settings are rejected on other types: a typo'd type must not
    // silently ignore them.
    for (const ProviderKind* other : providerKinds())
      for (auto key : other->options)
        if (const YAML::Node v = y[std::string(key)]; v && !takes(*kind, key))
          fail(v, p + "." + std::string(key), "not used by type " + type);
    if (kind->read_options) kind->read_options(YamlProviderOptions(*this, y, p), pc);

    if (!kind->remote) {
      if (y["base_url"]) fail(y["base_url"], p + ".base_url", "not used by type " + type);
    } else if (y["base_url"]) {
      parseBaseUrl(y["base_url"], p + ".base_url", pc);
    } else if (!kind->default_base_url) {
      fail(y, p + ".base_url", "required for type " + type);
    } else {
      // The vendor's public endpoint.
      parseBaseUrl(YAML::Node(kind->default_base_url(pc)), p + ".base_url", pc);
    }
    if (kind->api_key_refused && (y["api_key"] || y["api_key_env"]))
      fail(y["api_key"] ? y["api_key"] : y["api_key_env"], p + ".api_key", kind->api_key_refused);
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
    cfg.providers.push_back(std::move(pc));
  }
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
  // Boost.URL 1.81 reads "http://10.0.0.1.example.com" as host 10.0.0.1, path ".example.com".
  if (!pc.base_path.empty() && pc.base_path.front() != '/') fail(node, path, "the host is neither a name nor an address: \"" + pc.base_url + "\"");
  while (!pc.base_path.empty() && pc.base_path.back() == '/') pc.base_path.pop_back();
}

}  // namespace tahua::config_detail

