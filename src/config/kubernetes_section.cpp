// kubernetes: where the API server is and who tahua is to it. The defaults are a pod's:
// the service account's token, CA and namespace files, and the API server the kubelet
// puts in KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT. A default that cannot be
// found is not a config error (the config is valid in the pod it is written for) but
// stops the gateway at start.
#include <cstdlib>
#include <filesystem>

#include "config/loader_detail.h"
#include "http/http_url.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr std::string_view kServiceAccount = "/var/run/secrets/kubernetes.io/serviceaccount/";

constexpr Field kKubernetesFields[] = {
    boolean("resources", "false",
            "List and watch the tahua.dev/v1 resources (ModelRoute, RateLimitPolicy, PromptTemplate, Plugin, "
            "GuardrailPolicy) of the namespace.")
        .atRestart(),
    nonEmpty("api_server", "",
             "The API server, an http(s) URL. Default: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT` "
             "(a pod's).")
        .atRestart(),
    nonEmpty("namespace", "",
             "Where the resources and the scaled Deployments are (a DNS-1123 label). Default: the service account's "
             "namespace file.")
        .atRestart(),
    string("token_file", "/var/run/secrets/kubernetes.io/serviceaccount/token",
           "The bearer token, read again for every call (projected tokens rotate); \"\": none (an API server reached "
           "through `kubectl proxy`).")
        .atRestart(),
    string("ca_file", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
           "The API server's CA; \"\": the system's CAs. Must exist when set.")
        .atRestart(),
    duration("timeout", 100, "10s", "A list, a get, a patch.").atRestart(),
    duration("watch_timeout", 1000, "5m",
             "A watch's timeoutSeconds (at most 1h, the API server's cap); then it is watched again from its "
             "resourceVersion.")
        .atRestart(),
};
const Table kKubernetes("kubernetes",
                        "The Kubernetes API: the resources listed and watched, and the Deployments the healing scale "
                        "action patches. In a pod nothing needs setting; outside one a missing default is a warning at "
                        "--check-config and stops the gateway at start.",
                        kKubernetesFields);

}  // namespace

void Loader::loadKubernetes(const YAML::Node& n, Config& cfg) {
  Fields f(*this, n, "kubernetes", kKubernetes);
  const std::string p = f.path();
  KubernetesConfig& k = cfg.kubernetes;
  k.enabled = true;
  f.read("resources", k.resources);
  if (!f.read("api_server", k.api_server)) {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host) {
      k.unresolved = "kubernetes.api_server is not set and KUBERNETES_SERVICE_HOST is empty (not in a pod?)";
      host = "kubernetes.default.svc";
    }
    const std::string h = host;
    k.api_server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + (port && *port ? port : "443");
  }
  std::string url_error;
  if (!parseHttpUrl(k.api_server, &url_error, true))
    fail(n["api_server"] ? n["api_server"] : n, p + ".api_server", "expected an http(s) URL: " + url_error);
  // "": no token (an API server reached through `kubectl proxy`, which adds its own).
  k.token_file = fieldNamed(kKubernetesFields, "token_file").fallback;
  f.read("token_file", k.token_file);
  k.ca_file = fieldNamed(kKubernetesFields, "ca_file").fallback;
  f.read("ca_file", k.ca_file);
  std::error_code ec;
  if (!k.ca_file.empty() && !std::filesystem::is_regular_file(k.ca_file, ec)) {
    if (n["ca_file"]) fail(n["ca_file"], p + ".ca_file", "no such file: " + k.ca_file + " (\"\" uses the system's CAs)");
    if (k.unresolved.empty()) k.unresolved = "no service account CA at " + k.ca_file + " (not in a pod? set kubernetes.ca_file)";
  }
  if (!f.read("namespace", k.namespace_)) {
    bool ok = false;
    k.namespace_ = slurp(std::string(kServiceAccount) + "namespace", ok);
    while (!k.namespace_.empty() && (k.namespace_.back() == '\n' || k.namespace_.back() == ' ')) k.namespace_.pop_back();
    if (!ok || k.namespace_.empty()) {
      if (k.unresolved.empty())
        k.unresolved = "kubernetes.namespace is not set and there is no " + std::string(kServiceAccount) + "namespace (not in a pod?)";
      k.namespace_ = "default";
    }
  }
  // Outside a pod (`tahua --check-config` of a ConfigMap in CI) the pod's defaults are
  // missing: a warning here, an error when the gateway starts with them.
  if (!k.unresolved.empty()) warnings_.push_back(k.unresolved);
  if (!dnsLabel(k.namespace_))
    fail(n["namespace"] ? n["namespace"] : n, p + ".namespace", "\"" + k.namespace_ + "\" is not a namespace name (a DNS-1123 label)");
  f.read("timeout", k.timeout);
  if (f.read("watch_timeout", k.watch_timeout) && k.watch_timeout > Millis(3'600'000))
    fail(n["watch_timeout"], p + ".watch_timeout", "at most 1h (the API server's own cap)");
}

}  // namespace tahua::config_detail
