// The `files` section: where /v1/files and /v1/batches go, and how long ownership is kept.
#include "config/loader_detail.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kFilesFields[] = {
    nonEmpty("provider", "",
             "The provider /v1/files and /v1/batches go to (an openai or azure-openai one). Required unless `tenants` "
             "names one; without the section the endpoints answer 404 files_not_configured."),
    map("tenants", "{}", "Tenant name to provider, for tenants served by another provider than `provider`."),
    duration("ttl", 60'000, "30d", "How long the owner of a file or batch is remembered (every record expires)."),
    duration("poll_interval", 100, "1m", "How often the batch poller asks the provider about running batches."),
};
const Table kFiles("files", "Files and batches through a provider; each caller sees only its own tenant's "
                   "(docs/files-and-batches.md).",
                   kFilesFields);

}  // namespace

void Loader::loadFiles(const YAML::Node& n, Config& cfg) {
  Fields fields(*this, n, "files", kFiles);
  const std::string p = fields.path();
  FilesConfig& f = cfg.files;
  auto target = [&](const YAML::Node& node, const std::string& path) {
    const std::string name = nonEmpty(node, path);
    const std::size_t index = providerIndex(node, path, name, cfg);
    const std::string& type = cfg.providers[index].type;
    if (type != "openai" && type != "azure-openai")
      fail(node, path, "provider \"" + name + "\" is of type " + type + ": files and batches are served by openai and azure-openai providers");
    if (!cfg.providers[index].serves(ProviderApi::Files))
      fail(node, path, "provider \"" + name + "\": its `apis` list does not name `files`");
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
  if (auto v = fields["provider"]) f.provider = target(v, p + ".provider");
  if (auto t = fields["tenants"]) {
    if (!t.IsMap()) fail(t, p + ".tenants", "expected a map of tenant name to provider name");
    for (const auto& kv : t) {
      const std::string tenant = kv.first.as<std::string>();
      f.tenants.emplace_back(tenant, target(kv.second, p + ".tenants." + tenant));
    }
  }
  if (f.provider.empty() && f.tenants.empty()) fail(n, p + ".provider", "required: the provider that serves /v1/files and /v1/batches");
  fields.read("ttl", f.ttl);
  fields.read("poll_interval", f.poll_interval);
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
