// YAML -> Config with strict validation. Every error names file, line, column and the
// field path, so an operator can fix a typo without guessing. Loading is off the data
// path, so exceptions are used internally and turned into a message at the boundary.
#include <yaml-cpp/yaml.h>

#include <boost/url/parse.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <set>
#include <sstream>

#include "config/config.h"

namespace tahua {
namespace {

// One {value, name} table per enum that is both read from YAML and printed back; the
// parse, the name function and the list of choices in errors all come from it.
template <class E>
struct Named {
  E value;
  std::string_view name;
};

constexpr Named<ProviderType> kProviderTypes[] = {
    {ProviderType::OpenAI, "openai"}, {ProviderType::AzureOpenAI, "azure-openai"},
    {ProviderType::Anthropic, "anthropic"}, {ProviderType::Gemini, "gemini"},
    {ProviderType::Bedrock, "bedrock"}, {ProviderType::Mock, "mock"},
};
constexpr Named<BalancePolicy> kBalancePolicies[] = {
    {BalancePolicy::WeightedRandom, "weighted_random"}, {BalancePolicy::RoundRobin, "round_robin"},
    {BalancePolicy::LeastOutstanding, "least_outstanding"}, {BalancePolicy::Latency, "latency"},
    {BalancePolicy::GpuAware, "gpu_aware"},
};
constexpr Named<HealingRuleConfig::Metric> kHealingMetrics[] = {
    {HealingRuleConfig::Metric::TtftP99, "ttft_p99"}, {HealingRuleConfig::Metric::ErrorRate, "error_rate"},
};
constexpr Named<HealingRuleConfig::Action> kHealingActions[] = {
    {HealingRuleConfig::Action::ShiftToFallback, "shift_to_fallback"}, {HealingRuleConfig::Action::Eject, "eject"},
};

template <class E, std::size_t N>
constexpr std::string_view nameOf(const Named<E> (&table)[N], E value) {
  for (const auto& e : table)
    if (e.value == value) return e.name;
  return "unknown";
}

template <class E, std::size_t N>
constexpr std::optional<E> valueOf(const Named<E> (&table)[N], std::string_view name) {
  for (const auto& e : table)
    if (e.name == name) return e.value;
  return std::nullopt;
}

// "a | b | c" or "a or b", as error messages list the accepted names.
template <class E, std::size_t N>
std::string choices(const Named<E> (&table)[N], std::string_view separator) {
  std::string out;
  for (const auto& e : table) {
    if (!out.empty()) out += separator;
    out += e.name;
  }
  return out;
}

struct ConfigFailure {
  std::string message;
};

// The one shape of every config error: "file[:line:column]: field: message". The
// position is left out when the node has none, the field when the error is about a file.
std::string configError(std::string_view file, const YAML::Mark& mark, std::string_view field, std::string_view msg) {
  std::string out(file);
  if (!mark.is_null()) out += ':' + std::to_string(mark.line + 1) + ':' + std::to_string(mark.column + 1);
  if (!field.empty()) {
    out += ": ";
    out += field;
  }
  out += ": ";
  out += msg;
  return out;
}

// Which file each part of a merged config directory came from.
struct SourceMap {
  std::map<std::string, std::string, std::less<>> sections;  // top-level key -> file
  std::vector<std::string> routes;                           // routes[i] -> file
  std::vector<std::string> route_labels;  // routes[i] -> "ModelRoute/name.spec" ("" for plain routes)
};

class Loader {
 public:
  explicit Loader(std::string source, const SourceMap* sources = nullptr) : source_(std::move(source)), sources_(sources) {}

  // The file a field path ("routes[3].target", "models[0].name") was read from.
  std::string fileOf(const std::string& field) const {
    if (!sources_) return source_;
    const auto end = field.find_first_of(".[");
    const std::string top = field.substr(0, end);
    if (top == "routes" && end != std::string::npos && field[end] == '[') {
      const std::size_t i = std::strtoul(field.c_str() + end + 1, nullptr, 10);
      if (i < sources_->routes.size()) return sources_->routes[i];
    }
    if (auto it = sources_->sections.find(top); it != sources_->sections.end()) return it->second;
    return source_;
  }

  // A ModelRoute's fields are named after the resource ("ModelRoute/x.spec.target"),
  // not the routes list it was merged into.
  std::string displayField(const std::string& field) const {
    if (!sources_ || field.rfind("routes[", 0) != 0) return field;
    const std::size_t i = std::strtoul(field.c_str() + 7, nullptr, 10);
    const auto close = field.find(']');
    if (i >= sources_->route_labels.size() || sources_->route_labels[i].empty() || close == std::string::npos) return field;
    return sources_->route_labels[i] + field.substr(close + 1);
  }

  [[noreturn]] void fail(const YAML::Node& node, const std::string& field, const std::string& msg) const {
    throw ConfigFailure{configError(fileOf(field), node.Mark(), field.empty() ? "(root)" : displayField(field), msg)};
  }

  // Rejects keys not in `allowed` (typos must not be silently ignored).
  void checkKeys(const YAML::Node& map, const std::string& path, std::initializer_list<std::string_view> allowed) {
    if (!map.IsMap()) fail(map, path, "expected a mapping");
    for (const auto& kv : map) {
      auto key = kv.first.as<std::string>();
      bool ok = false;
      for (auto a : allowed) ok = ok || a == key;
      if (!ok) {
        std::string list;
        for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        fail(kv.first, join(path, key), "unknown field (allowed: " + list + ")");
      }
    }
  }

  static std::string join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  }

  std::string str(const YAML::Node& node, const std::string& path) {
    if (!node.IsScalar()) fail(node, path, "expected a string");
    return node.Scalar();
  }

  std::string nonEmpty(const YAML::Node& node, const std::string& path) {
    auto s = str(node, path);
    if (s.empty()) fail(node, path, "must not be empty");
    return s;
  }

  bool boolean(const YAML::Node& node, const std::string& path) {
    bool v = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, v)) fail(node, path, "expected true or false");
    return v;
  }

  std::uint64_t integer(const YAML::Node& node, const std::string& path, std::uint64_t min, std::uint64_t max) {
    if (!node.IsScalar()) fail(node, path, "expected an integer");
    const std::string& s = node.Scalar();
    std::uint64_t v = 0;
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
      fail(node, path, "expected a non-negative integer, got \"" + s + "\"");
    v = std::stoull(s);
    if (v < min || v > max)
      fail(node, path, "must be between " + std::to_string(min) + " and " + std::to_string(max));
    return v;
  }

  double number(const YAML::Node& node, const std::string& path, const char* what) {
    if (!node.IsScalar()) fail(node, path, std::string("expected ") + what);
    const std::string& s = node.Scalar();
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !(v >= 0) || v > 1e6)
      fail(node, path, std::string("expected a non-negative number (") + what + "), got \"" + s + "\"");
    return v;
  }
  double price(const YAML::Node& node, const std::string& path) { return number(node, path, "USD per million tokens"); }

  Millis duration(const YAML::Node& node, const std::string& path, Millis min = Millis(0)) {
    if (!node.IsScalar()) fail(node, path, "expected a duration such as 250ms, 5s, 2m");
    auto d = parseDuration(node.Scalar());
    if (!d) fail(node, path, "invalid duration \"" + node.Scalar() + "\" (use e.g. 250ms, 5s, 2m)");
    if (*d < min) fail(node, path, "must be at least " + std::to_string(min.count()) + "ms");
    return *d;
  }

  TimeoutOverrides timeoutOverrides(const YAML::Node& t, const std::string& tp) {
    checkKeys(t, tp, {"connect", "first_byte", "idle", "total"});
    TimeoutOverrides o;
    if (auto v = t["connect"]) o.connect = duration(v, tp + ".connect", Millis(1));
    if (auto v = t["first_byte"]) o.first_byte = duration(v, tp + ".first_byte", Millis(1));
    if (auto v = t["idle"]) o.idle = duration(v, tp + ".idle", Millis(1));
    if (auto v = t["total"]) o.total = duration(v, tp + ".total", Millis(1));
    return o;
  }

  Config load(const YAML::Node& root) {
    Config cfg;
    cfg.source = source_;
    if (!root.IsDefined() || root.IsNull()) fail(root, "", "the file is empty");
    checkKeys(root, "", {"server", "listeners", "access_log", "limits", "timeouts", "providers", "models", "admin", "routes",
                         "healing"});
    if (auto n = root["server"]) loadServer(n, cfg.server);
    loadListeners(root["listeners"], root, cfg);
    if (auto n = root["access_log"]) loadAccessLog(n, cfg.access_log);
    if (auto n = root["limits"]) {
      checkKeys(n, "limits", {"max_concurrent_requests", "max_concurrent_streams", "queue_timeout", "max_queue"});
      if (auto v = n["queue_timeout"]) cfg.limits.queue_timeout = duration(v, "limits.queue_timeout");
      if (auto v = n["max_queue"]) cfg.limits.max_queue = integer(v, "limits.max_queue", 0, 10'000'000);
      if (auto v = n["max_concurrent_requests"])
        cfg.limits.max_concurrent_requests = integer(v, "limits.max_concurrent_requests", 0, 10'000'000);
      if (auto v = n["max_concurrent_streams"])
        cfg.limits.max_concurrent_streams = integer(v, "limits.max_concurrent_streams", 0, 10'000'000);
    }
    if (auto t = root["timeouts"]) cfg.default_timeouts = timeoutOverrides(t, "timeouts").apply(cfg.default_timeouts);
    loadProviders(root["providers"], root, cfg);
    loadModels(root["models"], root, cfg);
    resolveFallbacks(root["models"], cfg);
    if (auto n = root["routes"]) loadRoutes(n, cfg);
    if (auto n = root["admin"]) loadAdmin(n, cfg);
    if (auto n = root["healing"]) loadHealing(n, cfg);
    return cfg;
  }

  void loadHealing(const YAML::Node& n, Config& cfg) {
    const std::string p = "healing";
    checkKeys(n, p, {"interval", "audit_log", "rules"});
    HealingConfig& h = cfg.healing;
    if (auto v = n["interval"]) h.interval = duration(v, p + ".interval", Millis(10));
    if (auto v = n["audit_log"]) h.audit_log = nonEmpty(v, p + ".audit_log");
    auto rules = n["rules"];
    if (!rules) return;
    if (!rules.IsSequence()) fail(rules, p + ".rules", "expected a list");
    std::set<std::string> names;
    for (std::size_t i = 0; i < rules.size(); ++i) {
      const std::string rp = p + ".rules[" + std::to_string(i) + "]";
      const YAML::Node& y = rules[i];
      checkKeys(y, rp, {"name", "model", "deployment", "when", "action", "percent", "restore_after"});
      HealingRuleConfig r;
      if (!y["name"]) fail(y, rp + ".name", "required: names the rule in audit records and metrics");
      r.name = nonEmpty(y["name"], rp + ".name");
      if (!names.insert(r.name).second) fail(y["name"], rp + ".name", "duplicate rule name \"" + r.name + "\"");
      if (!y["model"]) fail(y, rp + ".model", "required: the model the rule watches");
      r.model = nonEmpty(y["model"], rp + ".model");
      const ModelConfig* model = cfg.findModel(r.model);
      if (!model) fail(y["model"], rp + ".model", "unknown model \"" + r.model + "\"");
      if (auto v = y["deployment"]) {
        r.deployment = nonEmpty(v, rp + ".deployment");
        bool known = r.deployment == "*";
        for (const auto& d : model->deployments) known = known || d.id == r.deployment;
        if (!known) fail(v, rp + ".deployment", "model \"" + r.model + "\" has no deployment \"" + r.deployment + "\" (or use \"*\")");
      }
      const std::string actions = choices(kHealingActions, " or ");
      if (!y["action"]) fail(y, rp + ".action", "required: " + actions);
      const std::string action = str(y["action"], rp + ".action");
      const auto parsed_action = valueOf(kHealingActions, action);
      if (!parsed_action) fail(y["action"], rp + ".action", "expected " + actions + ", got \"" + action + "\"");
      r.action = *parsed_action;
      if (r.action == HealingRuleConfig::Action::Eject) {
        if (r.deployment.empty()) fail(y["action"], rp + ".action", "eject needs `deployment` (an id, or \"*\" for each one)");
      } else {
        if (!r.deployment.empty()) fail(y["deployment"], rp + ".deployment", "shift_to_fallback watches the whole model; omit deployment");
        if (model->fallbacks.empty()) fail(y["action"], rp + ".action", "model \"" + r.model + "\" has no fallbacks to shift to");
      }
      if (auto v = y["percent"]) {
        r.percent = number(v, rp + ".percent", "a percentage");
        if (r.percent <= 0 || r.percent > 100) fail(v, rp + ".percent", "must be more than 0 and at most 100");
      }
      auto w = y["when"];
      if (!w) fail(y, rp + ".when", "required: {metric, above, for}");
      const std::string wp = rp + ".when";
      checkKeys(w, wp, {"metric", "above", "for", "min_requests"});
      const std::string metrics = choices(kHealingMetrics, " or ");
      if (!w["metric"]) fail(w, wp + ".metric", "required: " + metrics);
      const std::string metric = str(w["metric"], wp + ".metric");
      if (!w["above"]) fail(w, wp + ".above", "required: the threshold");
      const auto parsed_metric = valueOf(kHealingMetrics, metric);
      if (!parsed_metric) fail(w["metric"], wp + ".metric", "expected " + metrics + ", got \"" + metric + "\"");
      r.metric = *parsed_metric;
      if (r.metric == HealingRuleConfig::Metric::TtftP99) {
        r.above = static_cast<double>(duration(w["above"], wp + ".above", Millis(1)).count());
      } else {
        r.above = number(w["above"], wp + ".above", "a percentage");
        if (r.above >= 100) fail(w["above"], wp + ".above", "must be below 100");
      }
      if (auto v = w["for"]) r.for_ = duration(v, wp + ".for");
      if (auto v = w["min_requests"]) r.min_requests = static_cast<int>(integer(v, wp + ".min_requests", 1, 1'000'000));
      if (auto v = y["restore_after"]) r.restore_after = duration(v, rp + ".restore_after");
      h.rules.push_back(std::move(r));
    }
  }

  void loadServer(const YAML::Node& n, ServerConfig& s) {
    const std::string p = "server";
    checkKeys(n, p, {"workers", "max_connections", "max_header_bytes", "max_body_bytes", "max_response_bytes", "header_timeout",
                     "body_timeout", "keepalive_timeout", "client_write_timeout", "drain_timeout",
                     "stream_heartbeat", "drain_accept_grace", "deployment_header", "stream_buffer_bytes",
                     "max_stream_event_bytes", "max_url_bytes", "max_json_depth"});
    if (auto v = n["workers"]) s.workers = static_cast<unsigned>(integer(v, p + ".workers", 0, 256));
    if (auto v = n["max_connections"]) s.max_connections = integer(v, p + ".max_connections", 1, 10'000'000);
    if (auto v = n["max_header_bytes"]) s.max_header_bytes = integer(v, p + ".max_header_bytes", 1024, 1 << 20);
    if (auto v = n["max_body_bytes"]) s.max_body_bytes = integer(v, p + ".max_body_bytes", 1, 1ull << 30);
    if (auto v = n["max_response_bytes"])
      s.max_response_bytes = integer(v, p + ".max_response_bytes", 1024, 1ull << 32);
    if (auto v = n["header_timeout"]) s.header_timeout = duration(v, p + ".header_timeout", Millis(1));
    if (auto v = n["body_timeout"]) s.body_timeout = duration(v, p + ".body_timeout", Millis(1));
    if (auto v = n["keepalive_timeout"]) s.keepalive_timeout = duration(v, p + ".keepalive_timeout", Millis(1));
    if (auto v = n["client_write_timeout"])
      s.client_write_timeout = duration(v, p + ".client_write_timeout", Millis(1));
    if (auto v = n["drain_timeout"]) s.drain_timeout = duration(v, p + ".drain_timeout");
    if (auto v = n["drain_accept_grace"]) s.drain_accept_grace = duration(v, p + ".drain_accept_grace");
    if (auto v = n["stream_heartbeat"]) s.stream_heartbeat = duration(v, p + ".stream_heartbeat");
    if (auto v = n["stream_buffer_bytes"])
      s.stream_buffer_bytes = integer(v, p + ".stream_buffer_bytes", 1024, 1ull << 30);
    if (auto v = n["max_stream_event_bytes"])
      s.max_stream_event_bytes = integer(v, p + ".max_stream_event_bytes", 1024, 1ull << 30);
    if (auto v = n["max_url_bytes"]) s.max_url_bytes = integer(v, p + ".max_url_bytes", 256, 1 << 20);
    if (auto v = n["max_json_depth"]) s.max_json_depth = integer(v, p + ".max_json_depth", 8, 10'000);
    if (auto v = n["deployment_header"]) s.deployment_header = boolean(v, p + ".deployment_header");
  }

  void loadAdmin(const YAML::Node& n, Config& cfg) {
    const std::string p = "admin";
    checkKeys(n, p, {"listen", "token", "token_env"});
    AdminConfig& a = cfg.admin;
    if (!n["listen"]) fail(n, p + ".listen", "required: the admin API's own address and port");
    const YAML::Node& l = n["listen"];
    checkKeys(l, p + ".listen", {"address", "port"});
    if (auto v = l["address"]) a.listener.address = nonEmpty(v, p + ".listen.address");
    if (a.listener.address.find_first_not_of("0123456789abcdefABCDEF.:") != std::string::npos)
      fail(l["address"] ? l["address"] : l, p + ".listen.address", "must be an IPv4 or IPv6 literal");
    if (!l["port"]) fail(l, p + ".listen.port", "required");
    a.listener.port = static_cast<std::uint16_t>(integer(l["port"], p + ".listen.port", 0, 65535));
    for (const auto& pub : cfg.listeners)
      if (pub.port != 0 && pub.port == a.listener.port && pub.address == a.listener.address)
        fail(l["port"], p + ".listen.port", "must not be a public listener's address");
    if (n["token"] && n["token_env"]) fail(n["token"], p + ".token", "set token or token_env, not both");
    if (auto v = n["token"]) a.token = nonEmpty(v, p + ".token");
    if (auto v = n["token_env"]) {
      a.token_env = nonEmpty(v, p + ".token_env");
      if (const char* env = std::getenv(a.token_env.c_str()); env && *env) a.token = env;
      else warnings_.push_back("admin: environment variable " + a.token_env + " is not set; the admin API is off");
    }
    if (!n["token"] && !n["token_env"]) fail(n, p + ".token_env", "required: the admin API needs a token");
    if (!a.token.empty() && a.token.size() < 16) fail(n["token"] ? n["token"] : n["token_env"], p + ".token", "must be at least 16 characters");
    a.enabled = !a.token.empty();
  }

  void loadListeners(const YAML::Node& n, const YAML::Node& root, Config& cfg) {
    if (!n) fail(root, "listeners", "required: at least one listener");
    if (!n.IsSequence() || n.size() == 0) fail(n, "listeners", "expected a non-empty list");
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string p = "listeners[" + std::to_string(i) + "]";
      const YAML::Node& l = n[i];
      checkKeys(l, p, {"address", "port", "tls"});
      ListenerConfig lc;
      if (auto v = l["address"]) lc.address = nonEmpty(v, p + ".address");
      if (lc.address.find_first_not_of("0123456789abcdefABCDEF.:") != std::string::npos)
        fail(l["address"] ? l["address"] : l, p + ".address", "must be an IPv4 or IPv6 literal");
      if (auto v = l["port"]) lc.port = static_cast<std::uint16_t>(integer(v, p + ".port", 0, 65535));
      if (auto t = l["tls"]) {
        checkKeys(t, p + ".tls", {"cert_file", "key_file"});
        ServerTlsConfig tls;
        if (!t["cert_file"]) fail(t, p + ".tls.cert_file", "required");
        if (!t["key_file"]) fail(t, p + ".tls.key_file", "required");
        tls.cert_file = nonEmpty(t["cert_file"], p + ".tls.cert_file");
        tls.key_file = nonEmpty(t["key_file"], p + ".tls.key_file");
        for (auto* f : {&tls.cert_file, &tls.key_file})
          if (!std::ifstream(*f)) fail(t, p + ".tls", "cannot read file \"" + *f + "\"");
        lc.tls = std::move(tls);
      }
      cfg.listeners.push_back(std::move(lc));
    }
  }

  void loadAccessLog(const YAML::Node& n, AccessLogConfig& a) {
    checkKeys(n, "access_log", {"enabled", "path"});
    if (auto v = n["enabled"]) a.enabled = boolean(v, "access_log.enabled");
    if (auto v = n["path"]) a.path = nonEmpty(v, "access_log.path");
  }

  void loadProviders(const YAML::Node& n, const YAML::Node& root, Config& cfg) {
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

  void loadAws(const YAML::Node& a, const std::string& ap, ProviderConfig& pc) {
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

  void parseBaseUrl(const YAML::Node& node, const std::string& path, ProviderConfig& pc) {
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

  void loadModels(const YAML::Node& n, const YAML::Node& root, Config& cfg) {
    if (!n) fail(root, "models", "required: at least one model");
    if (!n.IsSequence() || n.size() == 0) fail(n, "models", "expected a non-empty list");
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string p = "models[" + std::to_string(i) + "]";
      const YAML::Node& y = n[i];
      checkKeys(y, p, {"name", "provider", "upstream_model", "pricing", "deployments", "balancing", "canary", "outlier",
                       "gpu", "fallbacks", "fallback_on", "fallback_response"});
      ModelConfig mc;
      if (!y["name"]) fail(y, p + ".name", "required");
      mc.name = nonEmpty(y["name"], p + ".name");
      if (cfg.model_index.count(mc.name)) fail(y["name"], p + ".name", "duplicate model name \"" + mc.name + "\"");
      // Either one deployment inline (provider + upstream_model) or a list.
      if (y["deployments"]) {
        if (y["provider"] || y["upstream_model"])
          fail(y["provider"] ? y["provider"] : y["upstream_model"], p + ".provider",
               "set provider/upstream_model or deployments, not both");
        const YAML::Node& ds = y["deployments"];
        if (!ds.IsSequence() || ds.size() == 0) fail(ds, p + ".deployments", "expected a non-empty list");
        for (std::size_t j = 0; j < ds.size(); ++j)
          mc.deployments.push_back(loadDeployment(ds[j], p + ".deployments[" + std::to_string(j) + "]", mc, cfg));
      } else {
        if (!y["provider"]) fail(y, p + ".provider", "required (or a deployments list)");
        DeploymentConfig d;
        d.provider = nonEmpty(y["provider"], p + ".provider");
        d.provider_index = providerIndex(y["provider"], p + ".provider", d.provider, cfg);
        d.upstream_model = y["upstream_model"] ? nonEmpty(y["upstream_model"], p + ".upstream_model") : mc.name;
        d.id = d.provider;
        d.node = d.id;
        mc.deployments.push_back(std::move(d));
      }
      if (auto v = y["balancing"]) {
        const std::string b = str(v, p + ".balancing");
        const auto policy = valueOf(kBalancePolicies, b);
        if (!policy) fail(v, p + ".balancing", "unknown policy \"" + b + "\" (" + choices(kBalancePolicies, " | ") + ")");
        mc.balancing = *policy;
      }
      if (auto c = y["canary"]) {
        const std::string cp = p + ".canary";
        checkKeys(c, cp, {"version", "percent", "sticky_header", "allow"});
        mc.canary.enabled = true;
        if (auto v = c["version"]) mc.canary.version = nonEmpty(v, cp + ".version");
        if (auto v = c["percent"]) mc.canary.percent = percent(v, cp + ".percent");
        if (auto v = c["sticky_header"]) {
          mc.canary.sticky_header = nonEmpty(v, cp + ".sticky_header");
          for (auto& ch : mc.canary.sticky_header) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
        if (auto v = c["allow"]) {
          if (!v.IsSequence()) fail(v, cp + ".allow", "expected a list of key values (user ids)");
          for (std::size_t k = 0; k < v.size(); ++k) mc.canary.allow.push_back(nonEmpty(v[k], cp + ".allow[" + std::to_string(k) + "]"));
        }
      }
      if (auto o = y["outlier"]) {
        const std::string op = p + ".outlier";
        checkKeys(o, op, {"consecutive_failures", "error_rate", "interval", "min_requests", "eject_for", "max_eject_for"});
        if (auto v = o["consecutive_failures"])
          mc.outlier.consecutive_failures = static_cast<int>(integer(v, op + ".consecutive_failures", 0, 10000));
        if (auto v = o["error_rate"]) mc.outlier.error_rate = static_cast<int>(integer(v, op + ".error_rate", 0, 100));
        if (auto v = o["interval"]) mc.outlier.interval = duration(v, op + ".interval", Millis(1));
        if (auto v = o["min_requests"]) mc.outlier.min_requests = static_cast<int>(integer(v, op + ".min_requests", 1, 1'000'000));
        if (auto v = o["eject_for"]) mc.outlier.eject_for = duration(v, op + ".eject_for", Millis(1));
        if (auto v = o["max_eject_for"]) mc.outlier.max_eject_for = duration(v, op + ".max_eject_for", Millis(1));
        if (mc.outlier.max_eject_for < mc.outlier.eject_for) fail(o, op + ".max_eject_for", "must not be below eject_for");
      }
      if (auto g = y["gpu"]) {
        const std::string gp = p + ".gpu";
        checkKeys(g, gp, {"gpu_util", "gpu_memory", "connections", "connections_scale", "queue", "queue_scale",
                          "degraded_factor", "eject_score", "top", "status_ttl"});
        GpuScoreConfig& gc = mc.gpu;
        for (auto [key, slot] : std::initializer_list<std::pair<const char*, double*>>{
                 {"gpu_util", &gc.gpu_util}, {"gpu_memory", &gc.gpu_memory}, {"connections", &gc.connections},
                 {"connections_scale", &gc.connections_scale}, {"queue", &gc.queue}, {"queue_scale", &gc.queue_scale},
                 {"degraded_factor", &gc.degraded_factor}, {"eject_score", &gc.eject_score}})
          if (auto v = g[key]) *slot = number(v, gp + "." + key, "a score weight or factor");
        if (gc.connections_scale <= 0 || gc.queue_scale <= 0) fail(g, gp, "connections_scale and queue_scale must be positive");
        if (auto v = g["top"]) gc.top = static_cast<int>(integer(v, gp + ".top", 1, 100));
        if (auto v = g["status_ttl"]) gc.status_ttl = duration(v, gp + ".status_ttl", Millis(1));
      }
      if (auto pr = y["pricing"]) {
        const std::string pp = p + ".pricing";
        checkKeys(pr, pp, {"input", "output", "cached_input"});
        if (!pr["input"] || !pr["output"]) fail(pr, pp, "input and output prices (USD per million tokens) are required");
        mc.pricing.set = true;
        mc.pricing.input = price(pr["input"], pp + ".input");
        mc.pricing.output = price(pr["output"], pp + ".output");
        mc.pricing.cached_input = pr["cached_input"] ? price(pr["cached_input"], pp + ".cached_input") : mc.pricing.input;
      }
      if (auto f = y["fallbacks"]) {
        if (!f.IsSequence()) fail(f, p + ".fallbacks", "expected a list of model names");
        for (std::size_t k = 0; k < f.size(); ++k) mc.fallbacks.push_back(nonEmpty(f[k], p + ".fallbacks[" + std::to_string(k) + "]"));
      }
      if (auto f = y["fallback_on"]) {
        if (!f.IsSequence()) fail(f, p + ".fallback_on", "expected a list of HTTP statuses");
        mc.fallback_on.clear();
        for (std::size_t k = 0; k < f.size(); ++k)
          mc.fallback_on.push_back(static_cast<int>(integer(f[k], p + ".fallback_on[" + std::to_string(k) + "]", 400, 599)));
      }
      if (auto f = y["fallback_response"]) {
        const std::string fp = p + ".fallback_response";
        checkKeys(f, fp, {"message", "status"});
        if (!f["message"]) fail(f, fp + ".message", "required: the text answered when every upstream failed");
        mc.fallback_response = true;
        mc.fallback_message = nonEmpty(f["message"], fp + ".message");
        if (auto v = f["status"]) mc.fallback_status = static_cast<int>(integer(v, fp + ".status", 200, 599));
      }
      for (auto& d : mc.deployments) d.index = cfg.deployment_count++;
      markCanaryDeployments(mc);
      cfg.model_index.emplace(mc.name, cfg.models.size());
      cfg.models.push_back(std::move(mc));
    }
  }

  void resolveFallbacks(const YAML::Node& n, Config& cfg) {
    for (std::size_t i = 0; i < cfg.models.size(); ++i) {
      ModelConfig& m = cfg.models[i];
      for (std::size_t k = 0; k < m.fallbacks.size(); ++k) {
        const std::string p = "models[" + std::to_string(i) + "].fallbacks[" + std::to_string(k) + "]";
        auto it = cfg.model_index.find(m.fallbacks[k]);
        if (it == cfg.model_index.end()) fail(n[i]["fallbacks"][k], p, "unknown model \"" + m.fallbacks[k] + "\"");
        if (it->second == i) fail(n[i]["fallbacks"][k], p, "a model cannot fall back to itself");
        m.fallback_indices.push_back(it->second);
      }
    }
  }

  DeploymentConfig loadDeployment(const YAML::Node& y, const std::string& p, const ModelConfig& mc, const Config& cfg) {
    checkKeys(y, p, {"id", "provider", "upstream_model", "weight", "version", "labels", "node"});
    DeploymentConfig d;
    if (!y["provider"]) fail(y, p + ".provider", "required");
    d.provider = nonEmpty(y["provider"], p + ".provider");
    d.provider_index = providerIndex(y["provider"], p + ".provider", d.provider, cfg);
    d.upstream_model = y["upstream_model"] ? nonEmpty(y["upstream_model"], p + ".upstream_model") : mc.name;
    d.id = y["id"] ? nonEmpty(y["id"], p + ".id") : d.provider;
    if (d.id.find_first_of("/ \t\r\n\"") != std::string::npos) fail(y["id"], p + ".id", "must not contain '/', quotes or spaces");
    for (const auto& other : mc.deployments)
      if (other.id == d.id)
        fail(y["id"] ? y["id"] : y, p + ".id", "duplicate deployment id \"" + d.id + "\" (set distinct ids)");
    if (auto v = y["weight"]) d.weight = static_cast<std::uint32_t>(integer(v, p + ".weight", 0, 1'000'000));
    if (auto v = y["version"]) d.version = nonEmpty(v, p + ".version");
    if (auto l = y["labels"]) {
      if (!l.IsMap()) fail(l, p + ".labels", "expected a mapping of label to value");
      for (const auto& kv : l) d.labels.emplace_back(str(kv.first, p + ".labels"), str(kv.second, p + ".labels"));
    }
    d.node = y["node"] ? nonEmpty(y["node"], p + ".node") : d.id;
    return d;
  }

  std::size_t providerIndex(const YAML::Node& node, const std::string& path, const std::string& name, const Config& cfg) {
    for (std::size_t j = 0; j < cfg.providers.size(); ++j)
      if (cfg.providers[j].name == name) return j;
    fail(node, path, "unknown provider \"" + name + "\"");
    return 0;
  }

  void loadRoutes(const YAML::Node& n, Config& cfg) {
    if (!n.IsSequence()) fail(n, "routes", "expected a list");
    std::set<std::string> names;
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string p = "routes[" + std::to_string(i) + "]";
      const YAML::Node& y = n[i];
      checkKeys(y, p, {"name", "match", "when", "target", "override", "limits", "timeouts"});
      RouteConfig r;
      r.name = y["name"] ? nonEmpty(y["name"], p + ".name") : "route-" + std::to_string(i);
      if (!names.insert(r.name).second)
        fail(y["name"] ? y["name"] : y, p + ".name", "duplicate route name \"" + r.name + "\"");
      if (!y["target"]) fail(y, p + ".target", "required: the model to send matching requests to");
      r.target = nonEmpty(y["target"], p + ".target");
      auto it = cfg.model_index.find(r.target);
      if (it == cfg.model_index.end()) fail(y["target"], p + ".target", "unknown model \"" + r.target + "\"");
      r.target_index = it->second;
      if (auto v = y["override"]) r.override_model = boolean(v, p + ".override");
      if (auto t = y["timeouts"]) r.timeouts = timeoutOverrides(t, p + ".timeouts");
      if (auto l = y["limits"]) {
        checkKeys(l, p + ".limits", {"max_concurrent_requests", "max_concurrent_streams"});
        if (auto v = l["max_concurrent_requests"])
          r.max_concurrent_requests = integer(v, p + ".limits.max_concurrent_requests", 0, 10'000'000);
        if (auto v = l["max_concurrent_streams"])
          r.max_concurrent_streams = integer(v, p + ".limits.max_concurrent_streams", 0, 10'000'000);
      }
      if (auto m = y["match"]) {
        const std::string mp = p + ".match";
        checkKeys(m, mp, {"model", "path", "headers", "query"});
        if (auto v = m["model"]) {
          std::vector<std::string> list;
          if (v.IsSequence()) {
            if (v.size() == 0) fail(v, mp + ".model", "must not be an empty list (omit it to match every model)");
            for (std::size_t k = 0; k < v.size(); ++k) list.push_back(nonEmpty(v[k], mp + ".model[" + std::to_string(k) + "]"));
          }
          else
            list.push_back(nonEmpty(v, mp + ".model"));
          for (auto& name : list) {
            if (name.find_first_of("*?[") != std::string::npos) {
              r.model_globs.push_back(std::move(name));
            } else {
              if (cfg.model_index.count(name) && !r.override_model)
                fail(v, mp + ".model", "\"" + name + "\" is a configured model, which clients reach directly, so this "
                                       "route would never apply to it; add override: true to the route to send its "
                                       "requests to \"" + r.target + "\" instead");
              r.models.push_back(std::move(name));
            }
          }
        }
        if (auto v = m["path"]) {
          r.path = nonEmpty(v, mp + ".path");
          if (r.path.front() != '/') fail(v, mp + ".path", "must start with /");
        }
        for (auto [key, out] : {std::pair<const char*, std::vector<std::pair<std::string, std::string>>*>{"headers", &r.headers},
                                {"query", &r.query}}) {
          if (auto h = m[key]) {
            if (!h.IsMap()) fail(h, mp + "." + key, "expected a mapping of name to value");
            for (const auto& kv : h) {
              std::string name = str(kv.first, mp + "." + key);
              if (std::string_view(key) == "headers")
                for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
              out->emplace_back(std::move(name), str(kv.second, mp + "." + key + "." + str(kv.first, mp)));
            }
          }
        }
      }
      if (auto w = y["when"]) {
        const std::string wp = p + ".when";
        checkKeys(w, wp, {"min_prompt_tokens", "max_prompt_tokens", "has_tools", "hours"});
        if (auto v = w["min_prompt_tokens"]) r.min_prompt_tokens = static_cast<std::int64_t>(integer(v, wp + ".min_prompt_tokens", 0, 100'000'000));
        if (auto v = w["max_prompt_tokens"]) r.max_prompt_tokens = static_cast<std::int64_t>(integer(v, wp + ".max_prompt_tokens", 0, 100'000'000));
        if (auto v = w["has_tools"]) r.has_tools = boolean(v, wp + ".has_tools") ? 1 : 0;
        if (auto v = w["hours"]) {
          // "HH:MM-HH:MM" in UTC.
          const std::string h = str(v, wp + ".hours");
          int a = 0, b = 0, c = 0, d = 0;
          char tail = 0;
          bool shape = h.size() == 11 && h[2] == ':' && h[5] == '-' && h[8] == ':';
          for (std::size_t k : {0, 1, 3, 4, 6, 7, 9, 10}) shape = shape && k < h.size() && std::isdigit(static_cast<unsigned char>(h[k]));
          if (!shape || std::sscanf(h.c_str(), "%2d:%2d-%2d:%2d%c", &a, &b, &c, &d, &tail) != 4 || a > 24 || c > 24 || b > 59 || d > 59 ||
              a * 60 + b > 1440 || c * 60 + d > 1440 || a * 60 + b == c * 60 + d)
            fail(v, wp + ".hours", "expected a UTC range \"HH:MM-HH:MM\", e.g. \"08:00-18:00\"");
          r.from_minute = a * 60 + b;
          r.to_minute = c * 60 + d;
        }
      }
      if (r.min_prompt_tokens >= 0 && r.max_prompt_tokens >= 0 && r.min_prompt_tokens > r.max_prompt_tokens)
        fail(y["when"], p + ".when.min_prompt_tokens", "must not exceed max_prompt_tokens (the route could never match)");
      const auto index = static_cast<std::uint32_t>(cfg.routes.size());
      if (r.models.empty() || !r.model_globs.empty()) cfg.routes_any_model.push_back(index);
      for (const auto& name : r.models) {
        auto& list = cfg.routes_by_model[name];
        if (list.empty() || list.back() != index) list.push_back(index);
      }
      cfg.routes.push_back(std::move(r));
    }
  }

  double percent(const YAML::Node& node, const std::string& path) {
    double v = number(node, path, "a percentage");
    if (v > 100) fail(node, path, "must be between 0 and 100");
    return v;
  }

  // A Kubernetes-style resource that is validated and listed, not acted on yet.
  void loadInertResource(const YAML::Node& spec, const std::string& kind, const std::string& name,
                         const std::string& file, Config& cfg) {
    const std::string p = kind + "/" + name + ".spec";
    Loader in_file(file);
    if (kind == "RateLimitPolicy") {
      in_file.checkKeys(spec, p, {"match", "requests_per_minute", "tokens_per_minute"});
      if (auto m = spec["match"]) in_file.checkKeys(m, p + ".match", {"model", "key", "tenant"});
      if (auto v = spec["requests_per_minute"]) in_file.integer(v, p + ".requests_per_minute", 1, 1'000'000'000);
      if (auto v = spec["tokens_per_minute"]) in_file.integer(v, p + ".tokens_per_minute", 1, 1'000'000'000'000);
    } else {  // PromptTemplate
      in_file.checkKeys(spec, p, {"template", "variables"});
      if (!spec["template"]) in_file.fail(spec, p + ".template", "required");
      in_file.nonEmpty(spec["template"], p + ".template");
      if (auto v = spec["variables"]; v && !v.IsSequence()) in_file.fail(v, p + ".variables", "expected a list of names");
    }
    cfg.inert_resources.push_back(kind + "/" + name);
    warnings_.push_back(file + ": " + kind + " \"" + name + "\" is valid but not enforced yet");
  }

  std::vector<std::string> warnings_;

 private:
  std::string source_;
  const SourceMap* sources_ = nullptr;
};

// yaml-cpp keeps both entries of a mapping whose key is repeated, and a lookup finds the
// first: a second `api_key` would be ignored without a word. Every mapping is walked once
// after parsing and a repeated key is an error at its second occurrence.
std::optional<std::string> duplicateKey(const YAML::Node& node, const std::string& file, const std::string& path,
                                        int depth = 0) {
  if (depth > 256) return std::nullopt;  // far deeper than any config; bounds the recursion
  if (node.IsMap()) {
    std::map<std::string, YAML::Mark, std::less<>> seen;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) continue;
      const std::string& key = kv.first.Scalar();
      const std::string field = path.empty() ? key : path + "." + key;
      if (auto [first, fresh] = seen.emplace(key, kv.first.Mark()); !fresh) {
        std::string msg = "duplicate key \"" + key + "\"";
        if (!first->second.is_null()) msg += " (first at line " + std::to_string(first->second.line + 1) + ")";
        return configError(file, kv.first.Mark(), field, msg + "; a key may appear once in a mapping");
      }
      if (auto e = duplicateKey(kv.second, file, field, depth + 1)) return e;
    }
  } else if (node.IsSequence()) {
    for (std::size_t i = 0; i < node.size(); ++i)
      if (auto e = duplicateKey(node[i], file, path + "[" + std::to_string(i) + "]", depth + 1)) return e;
  }
  return std::nullopt;
}

ConfigLoadResult loadNode(const std::function<YAML::Node()>& parse, std::string source) {
  ConfigLoadResult result;
  Loader loader(source);
  try {
    YAML::Node root = parse();
    if (auto dup = duplicateKey(root, source, "")) {
      result.error = std::move(*dup);
      return result;
    }
    result.config = std::make_shared<const Config>(loader.load(root));
    result.warnings = std::move(loader.warnings_);
  } catch (const ConfigFailure& f) {
    result.error = f.message;
  } catch (const YAML::Exception& e) {
    result.error = configError(source, e.mark, "(yaml)", e.msg);
  }
  return result;
}

}  // namespace

namespace {

std::vector<std::filesystem::path> yamlFiles(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    // Hidden entries include Kubernetes' ..data / ..2024_... ConfigMap internals.
    if (name.empty() || name.front() == '.') continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".yaml" && ext != ".yml") continue;
    if (!std::filesystem::is_regular_file(e.path(), ec)) continue;  // follows symlinks
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string slurp(const std::filesystem::path& p, bool& ok) {
  std::ifstream in(p, std::ios::binary);
  ok = static_cast<bool>(in);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

struct Resource {
  std::string file, kind, name;
  YAML::Node spec;
};

ConfigLoadResult loadConfigDir(const std::string& dir) {
  ConfigLoadResult result;
  const auto files = yamlFiles(dir);
  if (files.empty()) {
    result.error = configError(dir, YAML::Mark::null_mark(), "", "no *.yaml or *.yml files in the config directory");
    return result;
  }
  SourceMap sources;
  YAML::Node root(YAML::NodeType::Map);
  std::vector<Resource> resources;
  for (const auto& path : files) {
    const std::string file = path.string();
    bool ok = false;
    const std::string text = slurp(path, ok);
    if (!ok) {
      result.error = configError(file, YAML::Mark::null_mark(), "", "cannot open file");
      return result;
    }
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
      result.error = configError(file, e.mark, "(yaml)", e.msg);
      return result;
    }
    for (const auto& doc : docs) {
      if (!doc.IsDefined() || doc.IsNull()) continue;
      if (!doc.IsMap()) {
        result.error = configError(file, doc.Mark(), "(root)", "expected a mapping");
        return result;
      }
      if (auto dup = duplicateKey(doc, file, "")) {
        result.error = std::move(*dup);
        return result;
      }
      if (doc["apiVersion"] || doc["kind"]) {
        // apiVersion: tahua.dev/v1, kind, metadata.name, spec.
        const auto bad = [&](const YAML::Node& n, const std::string& field, const std::string& msg) {
          result.error = configError(file, n.Mark(), field, msg);
        };
        for (const auto& kv : doc) {
          const std::string key = kv.first.as<std::string>();
          if (key != "apiVersion" && key != "kind" && key != "metadata" && key != "spec") {
            bad(kv.first, key, "unknown field (allowed: apiVersion, kind, metadata, spec)");
            return result;
          }
        }
        if (!doc["apiVersion"] || !doc["apiVersion"].IsScalar() || doc["apiVersion"].Scalar() != "tahua.dev/v1") {
          bad(doc["apiVersion"] ? doc["apiVersion"] : doc, "apiVersion", "must be tahua.dev/v1");
          return result;
        }
        const std::string kind = doc["kind"] && doc["kind"].IsScalar() ? doc["kind"].Scalar() : "";
        if (kind != "ModelRoute" && kind != "RateLimitPolicy" && kind != "PromptTemplate") {
          bad(doc["kind"] ? doc["kind"] : doc, "kind", "unknown kind \"" + kind + "\" (ModelRoute | RateLimitPolicy | PromptTemplate)");
          return result;
        }
        const YAML::Node meta = doc["metadata"];
        if (!meta || !meta.IsMap() || !meta["name"] || !meta["name"].IsScalar() || meta["name"].Scalar().empty()) {
          bad(meta ? meta : doc, "metadata.name", "required");
          return result;
        }
        if (!doc["spec"] || !doc["spec"].IsMap()) {
          bad(doc["spec"] ? doc["spec"] : doc, kind + "/" + meta["name"].Scalar() + ".spec", "required: a mapping");
          return result;
        }
        resources.push_back(Resource{file, kind, meta["name"].Scalar(), doc["spec"]});
        continue;
      }
      for (const auto& kv : doc) {
        const std::string key = kv.first.as<std::string>();
        if (auto it = sources.sections.find(key); it != sources.sections.end()) {
          result.error = configError(file, kv.first.Mark(), key,
                                     "already defined in " + it->second + " (each top-level section belongs to one file)");
          return result;
        }
        root[key] = kv.second;
        sources.sections[key] = file;
      }
    }
  }
  // ModelRoutes follow the plain `routes` list, in file order.
  YAML::Node routes = root["routes"] ? root["routes"] : YAML::Node(YAML::NodeType::Sequence);
  if (routes.IsSequence())
    for (std::size_t i = 0; i < routes.size(); ++i) {
      sources.routes.push_back(sources.sections.count("routes") ? sources.sections["routes"] : dir);
      sources.route_labels.emplace_back();
    }
  for (const auto& r : resources) {
    if (r.kind != "ModelRoute") continue;
    YAML::Node route = r.spec;  // not a clone: clones lose the line numbers errors need
    if (route["name"]) {
      result.error = configError(r.file, route["name"].Mark(), "ModelRoute/" + r.name + ".spec.name", "set metadata.name instead");
      return result;
    }
    route["name"] = r.name;
    routes.push_back(route);
    sources.routes.push_back(r.file);
    sources.route_labels.push_back("ModelRoute/" + r.name + ".spec");
  }
  if (routes.IsSequence() && routes.size() > 0) root["routes"] = routes;
  Loader loader(dir, &sources);
  try {
    Config cfg = loader.load(root);
    cfg.source = dir;
    for (const auto& r : resources)
      if (r.kind != "ModelRoute") loader.loadInertResource(r.spec, r.kind, r.name, r.file, cfg);
    result.config = std::make_shared<const Config>(std::move(cfg));
    result.warnings = std::move(loader.warnings_);
  } catch (const ConfigFailure& f) {
    result.error = f.message;
  } catch (const YAML::Exception& e) {
    result.error = configError(dir, e.mark, "(yaml)", e.msg);
  }
  return result;
}

}  // namespace

bool readConfigBytes(const std::string& path, std::string& out) {
  std::error_code ec;
  bool ok = false;
  if (!std::filesystem::is_directory(path, ec)) {
    out = slurp(path, ok);
    return ok;
  }
  out.clear();
  for (const auto& f : yamlFiles(path)) {
    out += f.filename().string();
    out += '\0';
    out += slurp(f, ok);
    if (!ok) return false;
    out += '\0';
  }
  return true;
}

ConfigLoadResult loadConfigFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return loadConfigDir(path);
  std::ifstream in(path);
  if (!in) return ConfigLoadResult{nullptr, configError(path, YAML::Mark::null_mark(), "", "cannot open file"), {}};
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  return loadNode([&] { return YAML::Load(text); }, path);
}

ConfigLoadResult loadConfigString(std::string_view yaml, std::string_view source_name) {
  std::string text(yaml);
  return loadNode([&] { return YAML::Load(text); }, std::string(source_name));
}

}  // namespace tahua

namespace tahua {

std::string_view providerTypeName(ProviderType t) { return nameOf(kProviderTypes, t); }

void markCanaryDeployments(ModelConfig& model) {
  model.stable_table = {};
  model.canary_table = {};
  for (std::size_t i = 0; i < model.deployments.size(); ++i) {
    DeploymentConfig& d = model.deployments[i];
    d.canary = model.canary.enabled && d.version == model.canary.version;
    if (d.weight == 0) continue;
    PickTable& t = d.canary ? model.canary_table : model.stable_table;
    t.index.push_back(static_cast<std::uint32_t>(i));
    t.cumulative.push_back((t.cumulative.empty() ? 0 : t.cumulative.back()) + d.weight);
  }
}

std::string_view balancePolicyName(BalancePolicy p) { return nameOf(kBalancePolicies, p); }

}  // namespace tahua

namespace tahua {

std::string_view healingMetricName(HealingRuleConfig::Metric m) { return nameOf(kHealingMetrics, m); }

std::string_view healingActionName(HealingRuleConfig::Action a) { return nameOf(kHealingActions, a); }

}  // namespace tahua
