// What the gateway does with the shared store's records beyond tenants and keys: stored
// resources applied over the config file, node status reports and registered endpoints
// merged from every replica, and the one-replica sweep of what has expired.
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <algorithm>
#include <random>
#include <set>

#include "core/log.h"
#include "core/json_read.h"
#include "runtime/gateway.h"

namespace tahua {

ConfigPtr Gateway::withStoredResources(const ConfigPtr& base) {
  resources_ = store_->records(StateStore::kNamespaces[2]);
  // The cluster's objects first: what `kubectl apply` put there is what GitOps reviewed.
  std::vector<StoredResource> list = kube_resources_;
  std::set<std::string, std::less<>> from_kubernetes;
  for (const auto& r : kube_resources_) from_kubernetes.insert(r.id);
  std::vector<std::string> shadowed;
  for (const auto& r : resources_) {
    if (from_kubernetes.count(r.id)) shadowed.push_back("store resource " + r.id + " is not applied: a Kubernetes resource of the same kind and name is");
    else list.push_back({r.id, r.json, {}});
  }
  auto applied = applyStoredResources(base, list);
  applied.warnings.insert(applied.warnings.end(), shadowed.begin(), shadowed.end());
  std::string report;
  for (const auto& w : applied.warnings) report += w + "\n";
  for (const auto& [id, e] : applied.rejected) report += e + "\n";
  if (report != resources_report_) {
    for (const auto& w : applied.warnings) log::warn(w);
    for (const auto& [id, e] : applied.rejected)
      log::error(from_kubernetes.count(id) ? "a Kubernetes resource is invalid and not applied"
                                           : "a resource from the store is invalid and not applied",
                 {{"resource", id}, {"error", e}});
  }
  resources_report_ = std::move(report);
  return applied.config;
}

void Gateway::kubernetesResourcesChanged(std::vector<StoredResource> resources) {
  std::lock_guard lock(mutex_);
  if (resources.size() == kube_resources_.size() &&
      std::equal(resources.begin(), resources.end(), kube_resources_.begin(),
                 [](const StoredResource& a, const StoredResource& b) { return a.id == b.id && a.spec == b.spec; }))
    return;
  kube_resources_ = std::move(resources);
  if (auto error = publish(nullptr, "kubernetes resources")) {
    ++reloads_failed_;
    log::error("config with the Kubernetes resources failed; still serving the previous config", {{"error", *error}});
  }
}

void Gateway::resourcesChanged() {
  if (store_->records(StateStore::kNamespaces[2]) == resources_) return;
  if (auto error = publish(nullptr, "store resources")) {
    ++reloads_failed_;
    log::error("config with the store's resources failed; still serving the previous config", {{"error", *error}});
  }
}

void Gateway::sweepStore(Millis hold) {
  static const std::string owner = "sweep-" + std::to_string(std::random_device{}()) + std::to_string(::getpid());
  store_->tryLock("tahua:lock:sweep", owner, hold, [this](bool held) {
    if (!held) return;  // another replica sweeps this time
    const auto now = std::chrono::system_clock::now();
    std::size_t removed = 0;
    for (const auto& r : store_->records(StateStore::kNamespaces[4])) {
      auto reg = registrationFromRecord(r.id, r.json);
      if (!reg || reg->expires <= now) {
        store_->eraseRecord(StateStore::kNamespaces[4], r.id, [](std::optional<std::string>) {});
        ++removed;
      }
    }
    for (const auto& r : store_->records(StateStore::kNamespaces[3])) {
      boost::system::error_code ec;
      auto v = readJson(r.json, ec);
      const auto* at = ec || !v.is_object() ? nullptr : v.get_object().if_contains("reported_ms");
      const auto reported = at && at->is_int64() ? std::chrono::system_clock::time_point(std::chrono::milliseconds(at->get_int64()))
                                                 : std::chrono::system_clock::time_point{};
      if (now - reported > std::chrono::hours(1)) {
        store_->eraseRecord(StateStore::kNamespaces[3], r.id, [](std::optional<std::string>) {});
        ++removed;
      }
    }
    if (removed) log::info("store sweep: expired registrations and stale node reports removed", {{"removed", removed}});
  });
}

void Gateway::registrationsChanged() {
  auto records = store_->records(StateStore::kNamespaces[4]);
  if (records == registration_records_) return;
  registration_records_ = std::move(records);
  if (!admin_.endpoints().mergeStore(registration_records_)) return;
  if (auto error = publish(nullptr, "registration")) log::error("config with the registered endpoints failed", {{"error", *error}});
}

void Gateway::nodesChanged() {
  auto records = store_->records(StateStore::kNamespaces[3]);
  if (records == node_records_) return;
  node_records_ = std::move(records);
  if (NodeTablePtr table = admin_.mergeStoreNodes(node_records_)) publishNodes(std::move(table));
}

}  // namespace tahua
