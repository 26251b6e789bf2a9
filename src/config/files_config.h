// The `files` section (files_section.cpp): where /v1/files and /v1/batches go.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/model_config.h"
#include "core/duration.h"

namespace tahua {

// /v1/files and /v1/batches name no model: `provider` serves them (`tenants` may give a
// tenant its own), and the gateway remembers which tenant owns each file and batch for
// `ttl` (docs/files-and-batches.md). A batch is metered by a poller, every
// `poll_interval`, when it ends.
struct FilesConfig {
  std::string provider;  // empty: the endpoints answer 404 files_not_configured
  std::vector<std::pair<std::string, std::string>> tenants;  // tenant -> provider
  Millis ttl{30LL * 24 * 3600 * 1000};
  Millis poll_interval{60'000};
  // Built by the loader: one routing target per provider named above, a model of its
  // own (named "files:<provider>") that is not in `models` and never routable by name.
  std::vector<ModelConfig> targets;
  const ModelConfig* targetOf(std::string_view provider_name) const {
    for (const auto& t : targets)
      if (t.deployments.front().provider == provider_name) return &t;
    return nullptr;
  }
  const ModelConfig* targetFor(std::string_view tenant) const {
    for (const auto& [name, provider] : tenants)
      if (name == tenant) return targetOf(provider);
    return provider.empty() ? nullptr : targetOf(provider);
  }
};

}  // namespace tahua
