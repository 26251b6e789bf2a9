// The configuration snapshot. Built once by the loader, validated, then shared
// read-only (std::shared_ptr<const Config>) by every worker; a request keeps the
// snapshot it started with alive for its whole life.
//
// Each section's structs are in a header of their own, named after the section and
// beside the loader that fills them (server_config.h: server_sections.cpp, ...); this
// file gathers them into `Config` and declares loading and the stored resources.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/cache_config.h"
#include "config/files_config.h"
#include "config/guardrails_config.h"
#include "config/healing_config.h"
#include "config/kubernetes_config.h"
#include "config/mcp_config.h"
#include "config/model_config.h"
#include "config/plugin_config.h"
#include "config/prompt_config.h"
#include "config/provider_config.h"
#include "config/responses_config.h"
#include "config/route_config.h"
#include "config/server_config.h"
#include "config/store_config.h"
#include "config/telemetry_config.h"
#include "config/tenant_config.h"
#include "core/duration.h"

namespace tahua {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

struct Config {
  std::string source;  // file path, or "<built-in>"
  ServerConfig server;
  std::vector<ListenerConfig> listeners;
  AccessLogConfig access_log;
  TracingConfig tracing;
  UsageConfig usage;
  LimitsConfig limits;
  ProviderTimeouts default_timeouts;  // the top-level `timeouts`: every provider's starting point
  std::vector<ProviderConfig> providers;
  std::vector<ModelConfig> models;
  std::unordered_map<std::string, std::size_t, StringHash, std::equal_to<>> model_index;
  std::size_t deployment_count = 0;  // over all models (and the files and mcp targets: numberDeployments)
  FilesConfig files;
  McpConfig mcp;
  std::vector<RouteConfig> routes;
  // Precompiled lookup: routes naming a model exactly, by name; and the rest (globs or
  // no model matcher). Both lists in config order.
  std::unordered_map<std::string, std::vector<std::uint32_t>, StringHash, std::equal_to<>> routes_by_model;
  std::vector<std::uint32_t> routes_any_model;
  AdminConfig admin;
  HealingConfig healing;
  AuthConfig auth;
  StoreConfig store;
  DiscoveryConfig discovery;
  KubernetesConfig kubernetes;
  RegionConfig region;
  IdempotencyConfig idempotency;
  ResponsesConfig responses;
  CacheConfig cache;
  GuardrailsConfig guardrails;
  std::vector<TenantConfig> tenants;
  std::vector<ApiKeyConfig> keys;
  RateLimitConfig rate_limits;
  // Lua plugins, in the order they run (`plugins:` and Plugin resources).
  std::vector<PluginConfig> plugins;
  // Prompt templates (`prompts:` and PromptTemplate resources), by id then version.
  std::vector<PromptTemplateConfig> prompts;
  // The template `id` at `version` ("" or "latest": the greatest version), or null.
  const PromptTemplateConfig* findPrompt(std::string_view id, std::string_view version) const;
  std::uint64_t generation = 0;  // set when published: 1, 2, ... (admin API, logs)
  // Every field the reference marks "restart" (field_table.h), path → its YAML (the
  // default when absent), sorted: a reload names each one whose value changed.
  std::vector<std::pair<std::string, std::string>> restart_fields;

  const ModelConfig* findModel(std::string_view name) const {
    auto it = model_index.find(name);
    return it == model_index.end() ? nullptr : &models[it->second];
  }
  // Some model keeps answers in the response cache.
  bool anyModelCached() const {
    for (const auto& m : models)
      if (m.cache.enabled) return true;
    return false;
  }
  bool anyProviderUsable() const {
    for (const auto& p : providers)
      if (p.usable) return true;
    return false;
  }
};

using ConfigPtr = std::shared_ptr<const Config>;

// Why `model` cannot answer the gateway's own embeddings calls ("" : it can): unknown, or
// served by a provider kind whose adapter passes no embeddings through (openai,
// azure-openai and mock do; providers/embedding_call.h makes the calls).
std::string embeddingModelProblem(const Config& cfg, std::string_view model);

struct ConfigLoadResult {
  ConfigPtr config;   // set on success
  std::string error;  // "file:line:col: field.path: message" on failure
  std::vector<std::string> warnings;
};

// A file, or a directory: every *.yaml / *.yml in it (not hidden, in name order, each
// may hold several documents) is merged: plain documents contribute top-level sections
// (each section in one file only), `apiVersion: tahua.dev/v1` resources (ModelRoute,
// RateLimitPolicy, PromptTemplate) are collected. Errors name the file they come from.
// `listeners_optional`: `--listen` gives them (a config without `listeners` is not refused).
ConfigLoadResult loadConfigFile(const std::string& path, bool listeners_optional = false);
// The bytes a config path stands for (a file's, or a directory's yaml files with their
// names), for change detection. False if unreadable.
bool readConfigBytes(const std::string& path, std::string& out);
ConfigLoadResult loadConfigString(std::string_view yaml, std::string_view source_name);

// Resources kept in the state store (put through the admin API, or written straight to
// Redis), applied over the config file's: `id` is "Kind/name", `spec` the resource's
// spec as JSON (or YAML). The file wins: a resource it declares too (same kind and name)
// is skipped with a warning. An invalid one is skipped and reported in `rejected`
// ("id", "error naming it"); the others still apply. ModelRoutes follow the file's
// routes, in id order.
struct StoredResource {
  std::string id;
  std::string spec;
  std::string origin;  // named in messages: "" = "store resource", else e.g. "kubernetes"
};
struct StoredResourcesResult {
  ConfigPtr config;
  std::vector<std::string> warnings;
  std::vector<std::pair<std::string, std::string>> rejected;
};
StoredResourcesResult applyStoredResources(const ConfigPtr& base, const std::vector<StoredResource>& resources);
// Whether the config file declares resource Kind/name (the file's wins over a stored one).
bool declaredInFile(const Config& base, std::string_view kind, std::string_view name);
// The kinds a stored resource may have, and a name's rules (the admin API checks both).
bool storedResourceKind(std::string_view kind);
bool storedResourceName(std::string_view name);

// The built-in default: listens on 127.0.0.1:8080 and serves mock models.
std::string_view defaultConfigYaml();

}  // namespace tahua
