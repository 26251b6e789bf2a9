// Shared by the config loader's translation units only (src/config/*.cpp); the public
// API is in config.h. Loading is off the data path, so errors are thrown internally as
// ConfigFailure and turned into a message at the boundary.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <map>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/field_table.h"

namespace tahua::config_detail {

// The one shape of every config error: "file[:line:column]: field: message". The
// position is left out when the node has none, the field when the error is about a file.
std::string configError(std::string_view file, const YAML::Mark& mark, std::string_view field, std::string_view msg);

struct ConfigFailure {
  std::string message;
};

// One {value, name} table per enum that is both read from YAML and printed back; the
// parse, the *Name() function and the list of choices in errors all come from it.
template <class E>
struct Named {
  E value;
  std::string_view name;
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

// True when `bound` ("a | b | c", a Choice field's) lists the table's names in its order:
// the reference's choices and the names the value is parsed with cannot drift apart.
template <class E, std::size_t N>
constexpr bool sameChoices(const Named<E> (&table)[N], std::string_view bound) {
  for (const auto& e : table) {
    const auto bar = bound.find(" | ");
    if (bound.substr(0, bar) != e.name) return false;
    bound = bar == std::string_view::npos ? std::string_view{} : bound.substr(bar + 3);
  }
  return bound.empty();
}

// The field of `fields` named `name`, at compile time (not found: not a constant).
constexpr const schema::Field& fieldNamed(std::span<const schema::Field> fields, std::string_view name) {
  for (const auto& f : fields)
    if (f.name == name) return f;
  throw "no such field";
}

// Which file each part of a merged config directory came from.
struct SourceMap {
  std::map<std::string, std::string, std::less<>> sections;  // top-level key -> file
  std::vector<std::string> routes;                           // routes[i] -> file
  std::vector<std::string> route_labels;  // routes[i] -> "ModelRoute/name.spec" ("" for plain routes)
};

class Fields;

// Reads one YAML tree into a Config. The node readers are in node_readers.cpp, each
// section's loader in the file named after it.
class Loader {
 public:
  explicit Loader(std::string source, const SourceMap* sources = nullptr) : source_(std::move(source)), sources_(sources) {}

  Config load(const YAML::Node& root);

  // The file a field path ("routes[3].target", "models[0].name") was read from.
  std::string fileOf(const std::string& field) const;
  // A ModelRoute's fields are named after the resource ("ModelRoute/x.spec.target"),
  // not the routes list it was merged into.
  std::string displayField(const std::string& field) const;
  [[noreturn]] void fail(const YAML::Node& node, const std::string& field, const std::string& msg) const;

  // Node readers: each checks the node's shape and range and fails naming the field.
  // Rejects keys not in `allowed` (typos must not be silently ignored).
  void checkKeys(const YAML::Node& map, const std::string& path, std::span<const std::string_view> allowed);
  // The same through the mapping's table (field_table.h); `more`: a second table whose
  // fields are also allowed here (a provider's vendor options).
  void checkKeys(const YAML::Node& map, const std::string& path, const schema::Table& table,
                 std::span<const schema::Field> more = {});
  static std::string join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  }
  std::string str(const YAML::Node& node, const std::string& path);
  std::string nonEmpty(const YAML::Node& node, const std::string& path);
  bool boolean(const YAML::Node& node, const std::string& path);
  std::uint64_t integer(const YAML::Node& node, const std::string& path, std::uint64_t min, std::uint64_t max);
  // A non-negative number up to `max` (the bound is named in the error).
  double number(const YAML::Node& node, const std::string& path, const char* what, double max = 1e6);
  double price(const YAML::Node& node, const std::string& path);
  double percent(const YAML::Node& node, const std::string& path);
  Millis duration(const YAML::Node& node, const std::string& path, Millis min = Millis(0));
  TimeoutOverrides timeoutOverrides(const YAML::Node& t, const std::string& tp);

  // server_sections.cpp
  void loadServer(const YAML::Node& n, ServerConfig& s);
  void loadUploads(const YAML::Node& n, const std::string& p, UploadConfig& u);
  void loadListeners(const YAML::Node& n, const YAML::Node& root, Config& cfg);
  void loadLimits(const YAML::Node& n, LimitsConfig& l);
  void loadAdmin(const YAML::Node& n, Config& cfg);
  // telemetry_sections.cpp
  void loadAccessLog(const YAML::Node& n, AccessLogConfig& a);
  void loadTracing(const YAML::Node& n, TracingConfig& t);
  void loadUsage(const YAML::Node& n, UsageConfig& u, const Config& cfg);
  void loadPostgresDsn(const YAML::Node& y, const std::string& path, UsageSinkConfig& c);
  std::vector<std::pair<std::string, std::string>> headerMap(const YAML::Node& h, const std::string& path);
  // providers_section.cpp
  void loadProviders(const YAML::Node& n, const YAML::Node& root, Config& cfg);
  void parseBaseUrl(const YAML::Node& node, const std::string& path, ProviderConfig& pc);
  // models_section.cpp
  void loadModels(const YAML::Node& n, const YAML::Node& root, Config& cfg);
  void resolveFallbacks(const YAML::Node& n, Config& cfg);
  DeploymentConfig loadDeployment(const YAML::Node& y, const std::string& p, const ModelConfig& mc, const Config& cfg);
  std::size_t providerIndex(const YAML::Node& node, const std::string& path, const std::string& name, const Config& cfg);
  // routes_section.cpp
  void loadRoutes(const YAML::Node& n, Config& cfg);
  void loadRoute(const YAML::Node& y, const std::string& p, std::string name, Config& cfg);
  // A stored ModelRoute's spec: a route's fields but `name` (the resource's).
  void loadModelRoute(const YAML::Node& spec, const std::string& p, const std::string& name, Config& cfg);
  // healing_section.cpp
  void loadHealing(const YAML::Node& n, Config& cfg);
  HealingRuleConfig::Scale scaleSpec(const YAML::Node& y, const std::string& p);
  // tenants_section.cpp
  void loadTenants(const YAML::Node& n, Config& cfg);
  void loadKeys(const YAML::Node& n, Config& cfg);
  void loadAuth(const YAML::Node& n, Config& cfg);
  void loadJwtIssuers(const YAML::Node& n, Config& cfg);
  void loadRateLimits(const YAML::Node& n, Config& cfg);
  void loadTenantTokens(const YAML::Node& n, Config& cfg);
  void loadAdminTokens(const YAML::Node& n, Config& cfg);
  // store_section.cpp: `store` and `discovery`
  void loadStore(const YAML::Node& n, Config& cfg);
  void loadDiscovery(const YAML::Node& n, Config& cfg);
  void loadKubernetes(const YAML::Node& n, Config& cfg);
  void loadRegion(const YAML::Node& n, Config& cfg);  // after the store
  void loadFiles(const YAML::Node& n, Config& cfg);   // files_section.cpp
  void loadMcp(const YAML::Node& root, Config& cfg);  // mcp_section.cpp: the mcp providers' targets, the section
  std::string hostPort(const YAML::Node& n, const std::string& path);
  // redis_credentials.cpp: `username` and `password_env` of the Redis map `n`, the
  // password read from the environment; `url` (if any) must then have no credentials.
  // An unset variable is a warning ending with `unset` (what does not work then).
  RedisCredentials redisCredentials(const YAML::Node& n, const std::string& path, std::string_view url, std::string_view unset);
  // responses_section.cpp
  void loadIdempotency(const YAML::Node& n, Config& cfg);
  void loadResponses(const YAML::Node& n, Config& cfg);
  // cache_section.cpp
  void loadCache(const YAML::Node& n, Config& cfg);  // before the models (their defaults)
  void checkCacheModels(const YAML::Node& root, Config& cfg);  // after them: embedding models exist
  // A model's `cache:` over `base` (the top-level section's policy).
  CachePolicy cachePolicy(const YAML::Node& n, const std::string& path, const CachePolicy& base);
  // The policy's fields of the mapping `f` (the `cache` section or a model's), its
  // `semantic` mapping read through `semantic`.
  CachePolicy cachePolicy(Fields& f, const schema::Table& semantic, const CachePolicy& base);
  RateLimitPolicyConfig rateLimitPolicy(const YAML::Node& n, const std::string& path, const Config& cfg);
  // The limit fields of `f`'s mapping (kLimitFields); `caps`: the concurrency caps too.
  LimitSet limitSet(Fields& f, bool caps = true);
  // A policy's `match:` (rate limits, guardrails): each field a name or a list of names,
  // appended to its list; the mapping read through its table (whose fields are `fields`).
  using MatchField = std::pair<std::string_view, std::vector<std::string>*>;
  void matchLists(const YAML::Node& m, const std::string& path, const schema::Table& table,
                  std::initializer_list<MatchField> fields);
  // The same, only the fields given allowed (mcp_section.cpp's, until its mapping has a table).
  std::vector<std::string> modelList(const YAML::Node& n, const std::string& path, const Config& cfg);
  // plugins_section.cpp
  void loadPlugins(const YAML::Node& n, Config& cfg);
  void loadPrompts(const YAML::Node& n, Config& cfg);
  void loadGuardrails(const YAML::Node& n, Config& cfg);
  GuardrailPolicyConfig guardrailPolicy(const YAML::Node& n, const std::string& path, const std::string& name, const Config& cfg);
  void promptTemplate(const YAML::Node& spec, const std::string& path, const std::string& name, Config& cfg);
  // An auth link naming a plugin of `plugins:` that defines no on_auth is an error (a
  // plugin loaded later, from a resource or the admin API, is checked when the worker
  // builds the chain: a link without its plugin passes to the next).
  void checkAuthPlugins(const YAML::Node& auth, const Config& cfg);
  void plugin(const YAML::Node& spec, const std::string& path, const std::string& id, Config& cfg);
  // config_dir_loader.cpp: a Kubernetes-style resource that is validated and listed,
  // not acted on yet.
  void loadResource(const YAML::Node& spec, const std::string& kind, const std::string& name,
                         const std::string& file, Config& cfg);

  // Routes' policyRef: checked and linked (the route added to the policy's match.route)
  // when every policy is known. From files, at the end of load() (a directory's, after its
  // resources); `link_refs_now` (resources applied over a loaded config) at once.
  void linkPolicyRefs(Config& cfg);
  bool defer_policy_refs = false;
  bool link_refs_now = false;
  // `--listen` replaces the listeners: a config may then have none.
  bool listeners_optional = false;

  std::vector<std::string> warnings_;

 private:
  struct PendingRef {
    std::size_t route;
    YAML::Node node;
    std::string field;
  };
  std::vector<PendingRef> pending_refs_;
  std::map<std::string, std::string> restart_fields_;  // see Config::restart_fields
  std::string source_;
  const SourceMap* sources_ = nullptr;
};

// One mapping read through its table: constructing it refuses the keys the table lacks;
// each read names a field of the table (one it lacks is a bug in the loader, reported as
// a config error rather than a crash) and applies the table's bounds.
class Fields {
 public:
  // `more`: fields also allowed here, read by someone else (a provider's vendor options).
  Fields(Loader& loader, const YAML::Node& map, std::string path, const schema::Table& table,
         std::span<const schema::Field> more = {});

  YAML::Node operator[](std::string_view name) const;  // undefined when absent
  std::string at(std::string_view name) const { return Loader::join(path_, name); }
  const std::string& path() const { return path_; }
  const YAML::Node& node() const { return map_; }

  // When the field is present: reads it into `out` and returns true. Absent: false, or
  // an error "required" when the table says so.
  bool read(std::string_view name, std::uint64_t& out);
  bool read(std::string_view name, double& out);
  bool read(std::string_view name, bool& out);
  bool read(std::string_view name, Millis& out);
  bool read(std::string_view name, std::string& out);
  // A List field of non-empty strings (a name, or a list of names, is not accepted here:
  // a list only).
  bool read(std::string_view name, std::vector<std::string>& out);
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, std::uint64_t>)
  bool read(std::string_view name, T& out) {
    std::uint64_t v = static_cast<std::uint64_t>(out);  // the struct's default, for the drift check
    if (!read(name, v)) return false;
    out = static_cast<T>(v);
    return true;
  }

 private:
  const schema::Field& field(std::string_view name, schema::Kind kind) const;
  YAML::Node present(const schema::Field& f) const;
  // An absent field keeps the struct's value: with fallbackCheck set, one that differs
  // from the table's default is noted (the reference would say what the loader does not).
  template <class T>
  void checkFallback(const schema::Field& f, const T& kept);

  Loader& loader_;
  YAML::Node map_;
  std::string path_;
  const schema::Table& table_;
};

// Tests set this to collect "path: the reference says X, the loader keeps Y" for every
// absent field whose struct default differs from its table's (config_reference_test).
struct FallbackCheck {
  std::vector<std::string> drift;
  std::size_t checked = 0;  // absent fields compared
};
inline FallbackCheck* fallbackCheck = nullptr;

// The fields redisCredentials reads, for the tables of the Redis mappings that have them.
inline constexpr schema::Field kRedisUsernameField =
    schema::nonEmpty("username", "", "An ACL user (Redis 6+), with password_env.");
inline constexpr schema::Field kRedisPasswordEnvField = schema::nonEmpty(
    "password_env", "",
    "The environment variable holding the password, instead of the url (which then has none); read at start, unset: "
    "a warning, and that server is not used.");

// yaml-cpp keeps both entries of a repeated key; the error for the first one found.
std::optional<std::string> duplicateKey(const YAML::Node& node, const std::string& file, const std::string& path,
                                        int depth = 0);

// Plugins in the order they run: `order`, then as declared (plugins_section.cpp).
void sortPlugins(Config& cfg);

// A DNS-1123 label (a Kubernetes namespace, a region's name): lower-case letters, digits
// and '-' inside, 1 to `max` characters.
bool dnsLabel(std::string_view s, std::size_t max = 63);

// A file's bytes; `ok` false when it cannot be read.
std::string slurp(const std::filesystem::path& p, bool& ok);
// A YAML scalar as JSON text: a quoted one is a string; a plain one may be a number, a
// boolean or null.
std::string jsonScalar(const YAML::Node& n);

// A directory of *.yaml files merged into one config (config_dir_loader.cpp).
ConfigLoadResult loadConfigDir(const std::string& dir, bool listeners_optional = false);

}  // namespace tahua::config_detail
