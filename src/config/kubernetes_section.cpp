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

constexpr std::string_view kServiceAccount = "/var/run/secrets/kubernetes.io/serviceaccount/";

}  // namespace

void Loader::loadKubernetes(const YAML::Node& n, Config& cfg) {
  const std::string p = "kubernetes";
  if (!n.IsMap()) fail(n, p, "expected a mapping");
  checkKeys(n, p, {"resources", "api_server", "namespace", "token_file", "ca_file", "timeout", "watch_timeout"});
  KubernetesConfig& k = cfg.kubernetes;
  k.enabled = true;
  if (auto v = n["resources"]) k.resources = boolean(v, p + ".resources");
  if (auto v = n["api_server"]) {
    k.api_server = nonEmpty(v, p + ".api_server");
  } else {
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
  k.token_file = n["token_file"] ? str(n["token_file"], p + ".token_file") : std::string(kServiceAccount) + "token";
  k.ca_file = n["ca_file"] ? str(n["ca_file"], p + ".ca_file") : std::string(kServiceAccount) + "ca.crt";
  std::error_code ec;
  if (!k.ca_file.empty() && !std::filesystem::is_regular_file(k.ca_file, ec)) {
    if (n["ca_file"]) fail(n["ca_file"], p + ".ca_file", "no such file: " + k.ca_file + " (\"\" uses the system's CAs)");
    if (k.unresolved.empty()) k.unresolved = "no service account CA at " + k.ca_file + " (not in a pod? set kubernetes.ca_file)";
  }
  if (auto v = n["namespace"]) {
    k.namespace_ = nonEmpty(v, p + ".namespace");
  } else {
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
  if (auto v = n["timeout"]) k.timeout = duration(v, p + ".timeout", Millis(100));
  if (auto v = n["watch_timeout"]) {
    k.watch_timeout = duration(v, p + ".watch_timeout", Millis(1'000));
    if (k.watch_timeout > Millis(3'600'000)) fail(v, p + ".watch_timeout", "at most 1h (the API server's own cap)");
  }
}

}  // namespace tahua::config_detail
