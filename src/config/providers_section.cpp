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

using namespace schema;

constexpr Field kProviderFields[] = {
    nonEmpty("name", "", "Unique; models' deployments name the provider by it.").needed(),
    choice("type", "openai | azure-openai | anthropic | gemini | bedrock | vertex | mock | mcp", "",
           "The wire format and the vendor's own fields (the tables below); gemini: Google Gemini "
           "(`base_url` defaults to `https://generativelanguage.googleapis.com/v1beta`, the key is sent as "
           "`x-goog-api-key`); mcp: an MCP server fronted at /mcp (docs/mcp-gateway.md).")
        .needed(),
    nonEmpty("base_url", "",
             "The upstream, http or https; API paths are appended (`/chat/completions` ...). Default: the vendor's "
             "public endpoint where it has one; required for openai, azure-openai and mcp; refused for mock."),
    string("api_key", "", "The key, literally (prefer api_key_env); never logged, never sent to clients."),
    nonEmpty("api_key_env", "",
             "The environment variable holding the key, read at start; unset: a warning, and the provider's models "
             "answer 503 until it is set. Not with api_key."),
    map("headers", "{}", "Extra headers sent upstream with every request."),
    section("timeouts", "The same fields as `timeouts`, over them for this provider."),
    section("retry", "Tries of a request on this provider, only while nothing reached the client."),
    section("circuit_breaker",
            "A breaker per deployment of this provider, each worker judging its own calls; the section turns it on."),
    section("tls", "How the upstream's certificate is checked."),
    section("pool", "Idle keep-alive connections kept for reuse."),
};
const Table kProvider("providers[]",
                      "An upstream endpoint and its credentials. A vendor's own fields (the tables that follow) are "
                      "refused on the other types.",
                      kProviderFields);

constexpr Field kRetryFields[] = {
    integer("attempts", 1, 10, "1",
            "Tries in all; 1: no retry. Retried: a connection that never carried the request, and the statuses in "
            "on_status; a retry goes to another deployment of the model when there is one."),
    list("on_status", "[429, 502, 503, 504]", "Upstream statuses (400-599) worth another try."),
    duration("backoff", 0, "200ms", "The first wait; it doubles per try, with full jitter, and is at least the "
                                    "upstream's Retry-After."),
    duration("max_backoff", 0, "5s",
             "The longest wait; an upstream's Retry-After over it is not waited for: that answer goes to the client."),
};
const Table kRetry("providers[].retry", "Retries on the same provider, never once a byte reached the client (never a "
                   "second bill).",
                   kRetryFields);

constexpr Field kBreakerFields[] = {
    boolean("enabled", "true", "The section turns the breaker on; false keeps it off."),
    integer("window", 1, 10000, "20", "The last N calls are judged (a count-based window)."),
    duration("window_duration", 0, "0s",
             "Over 0: the calls of this last stretch of time are judged instead (at most 10,000 of them kept)."),
    integer("min_calls", 1, 10000, "10", "No verdict on fewer calls; at most `window` with a count-based window."),
    integer("failure_rate", 1, 100, "50", "Percent of failed calls (connect errors, timeouts, 5xx) that opens it."),
    duration("slow_call", 0, "30s", "Time to first byte counted as slow; 0s: no call is slow."),
    integer("slow_call_rate", 1, 100, "80", "Percent of slow calls that opens it."),
    duration("open_for", 1, "60s",
             "Open this long: its deployment is out of selection, and a request left without one gets 503 "
             "circuit_open at once, nothing sent upstream; then half-open."),
    integer("half_open_probes", 1, 1000, "3", "Calls let through half-open; all must succeed to close it."),
};
const Table kBreaker("providers[].circuit_breaker",
                     "Per deployment of the provider, in each worker (defaults from Resilience4j's for LLM upstreams).",
                     kBreakerFields);

constexpr Field kTlsFields[] = {
    boolean("verify", "true", "Verify the upstream's certificate chain and host name."),
    nonEmpty("ca_file", "", "Trust the CAs of this PEM file instead of the system's."),
};
const Table kTls("providers[].tls", "The upstream's TLS (https base_url).", kTlsFields);

constexpr Field kPoolFields[] = {
    integer("max_idle", 0, 100000, "64", "Idle keep-alive connections kept per worker for this provider."),
    duration("idle_timeout", 1, "60s", "An idle connection older than this is not reused."),
};
const Table kPool("providers[].pool", "The provider's connection pool.", kPoolFields);

// Every vendor's own fields, each once, in vendors.h's order: a provider may hold any of
// them, and those of other types are refused by name.
std::span<const Field> vendorFields() {
  static const std::vector<Field> all = [] {
    std::vector<Field> out;
    for (const ProviderKind* k : providerKinds())
      for (const Field& f : k->options)
        if (std::none_of(out.begin(), out.end(), [&](const Field& o) { return o.name == f.name; })) out.push_back(f);
    return out;
  }();
  return all;
}

// A vendor's settings (config/provider_kind.h) read through the loader's own node readers,
// bounded by their fields.
class YamlProviderOptions final : public ProviderOptions {
 public:
  YamlProviderOptions(Loader& loader, const YAML::Node& map, std::string path, std::span<const Field> fields)
      : loader_(loader), map_(map), path_(std::move(path)), fields_(fields) {}

  bool has(std::string_view key) const override { return static_cast<bool>(node(key)); }
  std::string text(std::string_view key) const override { return loader_.nonEmpty(node(key), field(key)); }
  std::int64_t integer(std::string_view key) const override {
    const Field& f = described(key);
    return static_cast<std::int64_t>(
        loader_.integer(node(key), field(key), static_cast<std::uint64_t>(f.min), static_cast<std::uint64_t>(f.max)));
  }
  bool boolean(std::string_view key) const override { return loader_.boolean(node(key), field(key)); }
  Millis duration(std::string_view key) const override {
    return loader_.duration(node(key), field(key), Millis(static_cast<Millis::rep>(described(key).min)));
  }
  std::vector<std::string> strings(std::string_view key) const override {
    const YAML::Node n = node(key);
    if (described(key).kind != Kind::List) loader_.fail(map_, field(key), "internal: not a list field");
    if (!n.IsSequence()) loader_.fail(n, field(key), "expected a list");
    std::vector<std::string> out;
    for (std::size_t i = 0; i < n.size(); ++i) out.push_back(loader_.nonEmpty(n[i], field(key) + "[" + std::to_string(i) + "]"));
    return out;
  }
  std::unique_ptr<ProviderOptions> section(std::string_view key, const Table& table) const override {
    const YAML::Node n = node(key);
    loader_.checkKeys(n, field(key), table);
    return std::make_unique<YamlProviderOptions>(loader_, n, field(key), table.fields);
  }
  [[noreturn]] void fail(std::string_view key, const std::string& message) const override {
    const YAML::Node n = node(key);
    loader_.fail(n ? n : map_, field(key), message);
  }
  void warn(const std::string& message) const override { loader_.warnings_.push_back(message); }

 private:
  YAML::Node node(std::string_view key) const { return map_[std::string(key)]; }
  std::string field(std::string_view key) const { return path_ + "." + std::string(key); }
  const Field& described(std::string_view key) const {
    for (const Field& f : fields_)
      if (f.name == key) return f;
    loader_.fail(map_, field(key), "internal: a vendor reads a field its table lacks");
  }

  Loader& loader_;
  YAML::Node map_;
  std::string path_;
  std::span<const Field> fields_;
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
  for (const Field& f : kind.options)
    if (f.name == key) return true;
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
    // The common fields and every vendor's own (those of other types are refused below).
    Fields f(*this, y, p, kProvider, vendorFields());
    ProviderConfig pc;
    f.read("name", pc.name);
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
    for (const Field& other : vendorFields())
      if (const YAML::Node v = y[std::string(other.name)]; v && !takes(*kind, other.name))
        fail(v, p + "." + std::string(other.name), "not used by type " + type);
    if (kind->read_options) kind->read_options(YamlProviderOptions(*this, y, p, kind->options), pc);

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
    f.read("api_key", pc.api_key);
    if (f.read("api_key_env", pc.api_key_env)) {
      const char* env = std::getenv(pc.api_key_env.c_str());
      if (env && *env) {
        pc.api_key = env;
      } else {
        pc.usable = false;
        warnings_.push_back("provider \"" + pc.name + "\": environment variable " + pc.api_key_env +
                            " is not set; its models answer 503 until it is");
      }
    }
    if (auto h = f["headers"]) {
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
    if (auto t = f["timeouts"]) pc.timeouts = timeoutOverrides(t, f.at("timeouts")).apply(pc.timeouts);
    if (auto r = f["retry"]) {
      Fields rf(*this, r, f.at("retry"), kRetry);
      rf.read("attempts", pc.retry.attempts);
      if (auto v = rf["on_status"]) {
        if (!v.IsSequence()) fail(v, rf.at("on_status"), "expected a list of HTTP statuses");
        pc.retry.on_status.clear();
        for (std::size_t k = 0; k < v.size(); ++k)
          pc.retry.on_status.push_back(static_cast<int>(integer(v[k], rf.at("on_status") + "[" + std::to_string(k) + "]", 400, 599)));
      }
      rf.read("backoff", pc.retry.backoff);
      rf.read("max_backoff", pc.retry.max_backoff);
    }
    if (auto c = f["circuit_breaker"]) {
      Fields cf(*this, c, f.at("circuit_breaker"), kBreaker);
      auto& cb = pc.circuit_breaker;
      cb.enabled = true;  // a circuit_breaker section turns it on unless enabled: false
      cf.read("enabled", cb.enabled);
      cf.read("window", cb.window);
      cf.read("min_calls", cb.min_calls);
      cf.read("failure_rate", cb.failure_rate);
      cf.read("slow_call", cb.slow_call);
      cf.read("slow_call_rate", cb.slow_call_rate);
      cf.read("open_for", cb.open_for);
      cf.read("half_open_probes", cb.half_open_probes);
      cf.read("window_duration", cb.window_duration);
      if (cb.window_duration.count() == 0 && cb.min_calls > cb.window) fail(c, cf.at("min_calls"), "must not exceed window");
    }
    if (auto t = f["tls"]) {
      Fields tf(*this, t, f.at("tls"), kTls);
      tf.read("verify", pc.tls_verify);
      if (tf.read("ca_file", pc.ca_file) && !std::ifstream(pc.ca_file))
        fail(t["ca_file"], tf.at("ca_file"), "cannot read file \"" + pc.ca_file + "\"");
    }
    if (auto t = f["pool"]) {
      Fields pf(*this, t, f.at("pool"), kPool);
      pf.read("max_idle", pc.pool_max_idle);
      pf.read("idle_timeout", pc.pool_idle_timeout);
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

