// The `kubernetes` section (kubernetes_section.cpp): the API server tahua lists and
// watches resources from, and whose Deployments self-healing scales.
#pragma once

#include <string>

#include "core/duration.h"

namespace tahua {

// The Kubernetes API (config `kubernetes`): tahua.dev/v1 resources listed and watched
// from it (`resources`), and the Deployments self-healing's `scale` action patches. The
// loader fills the in-cluster defaults (the service account's files, the
// KUBERNETES_SERVICE_HOST/PORT variables), so every field here is concrete.
struct KubernetesConfig {
  bool enabled = false;          // the section is present
  bool resources = false;        // list and watch the resource kinds
  std::string api_server;        // https://host:port
  std::string namespace_;        // where the resources and the scaled Deployments are
  std::string token_file;        // read again for every call: projected tokens rotate ("": none)
  std::string ca_file;           // the API server's CA ("": the system's)
  Millis timeout{10'000};        // a list, a get, a patch
  Millis watch_timeout{300'000};  // a watch's timeoutSeconds; then watched again from its resourceVersion
  std::string unresolved;        // a pod default that is missing here (not in a pod): the gateway refuses to start
  bool operator==(const KubernetesConfig&) const = default;
};

}  // namespace tahua
