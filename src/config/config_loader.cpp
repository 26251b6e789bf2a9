// YAML -> Config with strict validation: the entry points and the top level of the file.
// Each section is read in the file named after it; the shared node readers and the one
// error formatter are in node_readers.cpp.
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "config/loader_detail.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kRoot[] = {
    section("server", "The gateway's own limits and timeouts: connections, heads, bodies, streams, drain."),
    list("listeners", "", "The public HTTP(S) listeners. Required (at least one), unless `--listen` gives them.").atRestart(),
    section("limits", "Concurrency caps (bulkheads) for the whole gateway."),
    section("timeouts", "Defaults for every provider's `timeouts` (the same fields)."),
    section("access_log", "One JSON line per request (docs/observability.md)."),
    list("providers", "", "Upstream endpoints and their credentials. Required: at least one; names are unique.").needed(),
    list("models", "", "The models clients name. Required: at least one, unless a provider is `type: mcp`."),
    list("routes", "[]", "Routing rules over the requested model, path, headers, caller and prompt; the first match wins."),
    section("admin", "The admin API on its own listener (docs/admin-api.md)."),
    section("healing", "Self-healing rules: eject, shift to a fallback, or scale on what the metrics show."),
    list("tenants", "[]", "Tenants: their models and limits. Declaring tenants or keys turns authentication on."),
    list("keys", "[]", "API keys (by SHA-256), each of a tenant."),
    section("auth", "How callers are authenticated: chains of links over paths and headers."),
    section("rate_limits", "Token- and request-aware limits: per model, and policies per key, tenant or all."),
    section("store", "Where shared state lives (limits, keys, replicas): this process, or Redis.").atRestart(),
    section("idempotency", "`Idempotency-Key` answers kept and replayed."),
    section("discovery", "Upstreams found in DNS (SRV / A records) or the Kubernetes API."),
    section("kubernetes", "The Kubernetes API: resources and the scale action.").atRestart(),
    section("region", "This replica's region, and the peers it shares limits with.").atRestart(),
    section("tracing", "OpenTelemetry traces (OTLP/HTTP, protobuf or JSON)."),
    section("usage", "Usage records for billing, one per request, delivered at least once."),
    section("files", "Serve /v1/files and /v1/batches through a provider."),
    section("mcp", "The MCP gateway's rules; /mcp is served whenever a provider has `type: mcp`."),
    list("plugins", "[]", "Lua plugins run in a sandbox (docs/plugins.md)."),
    list("prompts", "[]", "Prompt templates (docs/prompt-templates.md)."),
    section("responses", "Stored responses: the Responses API's conversation state."),
    section("cache", "The response cache: exact, semantic, and a shared Redis layer (docs/response-cache.md)."),
    section("guardrails", "Content rules over requests and answers (docs/guardrails.md)."),
};

}  // namespace

const schema::Table kRootTable("", "A config file is one YAML mapping of these sections.", kRoot);

Config Loader::load(const YAML::Node& root) {
  Config cfg;
  cfg.source = source_;
  if (!root.IsDefined() || root.IsNull()) fail(root, "", "the file is empty");
  checkKeys(root, "", kRootTable);
  if (auto n = root["server"]) loadServer(n, cfg.server);
  loadListeners(root["listeners"], root, cfg);
  if (auto n = root["access_log"]) loadAccessLog(n, cfg.access_log);
  if (auto n = root["limits"]) loadLimits(n, cfg.limits);
  if (auto t = root["timeouts"]) cfg.default_timeouts = timeoutOverrides(t, "timeouts").apply(cfg.default_timeouts);
  loadProviders(root["providers"], root, cfg);
  if (auto n = root["cache"]) loadCache(n, cfg);  // before the models: their default policy
  loadModels(root["models"], root, cfg);
  resolveFallbacks(root["models"], cfg);
  if (auto n = root["routes"]) loadRoutes(n, cfg);
  if (auto n = root["admin"]) loadAdmin(n, cfg);
  if (auto n = root["healing"]) loadHealing(n, cfg);
  if (auto n = root["tenants"]) loadTenants(n, cfg);
  if (auto n = root["keys"]) loadKeys(n, cfg);
  // Declaring tenants or keys turns authentication on; `auth.enabled: false` is the
  // explicit way to keep it off (limits then have no caller to count against).
  cfg.auth.enabled = !cfg.tenants.empty() || !cfg.keys.empty();
  if (auto n = root["auth"]) loadAuth(n, cfg);
  if (auto n = root["rate_limits"]) loadRateLimits(n, cfg);
  if (auto n = root["store"]) loadStore(n, cfg);
  if (auto n = root["discovery"]) loadDiscovery(n, cfg);
  if (auto n = root["kubernetes"]) loadKubernetes(n, cfg);
  if (auto n = root["region"]) loadRegion(n, cfg);
  if (auto n = root["files"]) loadFiles(n, cfg);
  loadMcp(root, cfg);
  numberDeployments(cfg);
  for (std::size_t i = 0; i < cfg.healing.rules.size(); ++i)
    if (cfg.healing.rules[i].action == HealingRuleConfig::Action::Scale && !cfg.kubernetes.enabled)
      fail(root["healing"]["rules"][i]["action"], "healing.rules[" + std::to_string(i) + "].action",
           "scale patches a Kubernetes Deployment: it needs the `kubernetes` section");
  if (auto n = root["idempotency"]) loadIdempotency(n, cfg);
  if (auto n = root["responses"]) loadResponses(n, cfg);
  if (auto n = root["tracing"]) loadTracing(n, cfg.tracing);
  if (auto n = root["usage"]) loadUsage(n, cfg.usage, cfg);  // after store: a Redis sink may use its URL
  if (auto n = root["admin"]; n && n["tenant_tokens"]) loadTenantTokens(n["tenant_tokens"], cfg);
  if (auto n = root["plugins"]) loadPlugins(n, cfg);
  if (auto n = root["prompts"]) loadPrompts(n, cfg);
  if (auto n = root["guardrails"]) loadGuardrails(n, cfg);
  checkCacheModels(root, cfg);
  for (std::size_t i = 0; i < cfg.server.ready_models.size(); ++i)
    if (!cfg.findModel(cfg.server.ready_models[i]))
      fail(root["server"]["readiness"]["require_models"][i], "server.readiness.require_models[" + std::to_string(i) + "]",
           "unknown model \"" + cfg.server.ready_models[i] + "\"");
  if (auto n = root["auth"]) checkAuthPlugins(n, cfg);
  if (!defer_policy_refs) linkPolicyRefs(cfg);
  if (cfg.admin.enabled && cfg.auth.enabled && cfg.store.type == StoreConfig::Type::Memory && cfg.store.journal.empty())
    warnings_.push_back("store.journal is not set: tenants and keys created through the admin API, and quota consumption, "
                        "will not survive a restart");
  if (!cfg.auth.enabled)
    warnings_.push_back("authentication is off: every client may call without an API key (declare `tenants` and `keys` "
                        "to require one)");
  cfg.restart_fields.assign(restart_fields_.begin(), restart_fields_.end());
  return cfg;
}

// yaml-cpp keeps both entries of a mapping whose key is repeated, and a lookup finds the
// first: a second `api_key` would be ignored without a word. Every mapping is walked once
// after parsing and a repeated key is an error at its second occurrence.
std::optional<std::string> duplicateKey(const YAML::Node& node, const std::string& file, const std::string& path,
                                        int depth) {
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

namespace {

ConfigLoadResult loadNode(const std::function<YAML::Node()>& parse, std::string source, bool listeners_optional) {
  ConfigLoadResult result;
  Loader loader(source);
  loader.listeners_optional = listeners_optional;
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
}  // namespace tahua::config_detail

namespace tahua {

ConfigLoadResult loadConfigFile(const std::string& path, bool listeners_optional) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return config_detail::loadConfigDir(path, listeners_optional);
  std::ifstream in(path);
  if (!in) return ConfigLoadResult{nullptr, config_detail::configError(path, YAML::Mark::null_mark(), "", "cannot open file"), {}};
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  return config_detail::loadNode([&] { return YAML::Load(text); }, path, listeners_optional);
}

ConfigLoadResult loadConfigString(std::string_view yaml, std::string_view source_name) {
  std::string text(yaml);
  return config_detail::loadNode([&] { return YAML::Load(text); }, std::string(source_name), false);
}

}  // namespace tahua
