// The `files` section: where /v1/files and /v1/batches go, and how long ownership is kept.
#include "config/loader_detail.h"

namespace tahua::config_detail {

void Loader::loadFiles(const YAML::Node& n, Config& cfg) {
  const std::string p = "files";
  checkKeys(n, p, {"provider", "tenants", "ttl", "poll_interval"});
  FilesConfig& f = cfg.files;
  auto target = [&](const YAML::Node& node, const std::string& path) {
    const std::string name = nonEmpty(node, path);
    const std::size_t index = providerIndex(node, path, name, cfg);
    const std::string& type = cfg.providers[index].type;
    if (type != "openai" && type != "azure-openai")
      fail(node, path, "provider \"" + name + "\" is of type " + type + ": files and batches are served by openai and azure-openai providers");
    if (f.targetOf(name)) return name;
    ModelConfig m;
    m.name = "files:" + name;
    DeploymentConfig d;
    d.provider = name;
    d.provider_index = index;
    d.id = name;
    m.deployments.push_back(std::move(d));
    markCanaryDeployments(m);
    f.targets.push_back(std::move(m));
    return name;
  };
  if (auto v = n["provider"]) f.provider = target(v, p + ".provider");
  if (auto t = n["tenants"]) {
    if (!t.IsMap()) fail(t, p + ".tenants", "expected a map of tenant name to provider name");
    for (const auto& kv : t) {
      const std::string tenant = kv.first.as<std::string>();
      f.tenants.emplace_back(tenant, target(kv.second, p + ".tenants." + tenant));
    }
  }
  if (f.provider.empty() && f.tenants.empty()) fail(n, p + ".provider", "required: the provider that serves /v1/files and /v1/batches");
  if (auto v = n["ttl"]) f.ttl = duration(v, p + ".ttl", Millis(60'000));
  if (auto v = n["poll_interval"]) f.poll_interval = duration(v, p + ".poll_interval", Millis(100));
}

}  // namespace tahua::config_detail

namespace tahua {

void numberDeployments(Config& config) {
  std::size_t count = 0;
  for (auto& m : config.models)
    for (auto& d : m.deployments) d.index = count++;
  for (auto& m : config.files.targets)
    for (auto& d : m.deployments) d.index = count++;
  for (auto& m : config.mcp.targets)
    for (auto& d : m.deployments) d.index = count++;
  config.deployment_count = count;
}

}  // namespace tahua
