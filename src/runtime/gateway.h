// The process: loads the snapshot, starts one worker per core with its own listeners
// (SO_REUSEPORT spreads connections), handles signals and the graceful drain.
#pragma once

#include <atomic>
#include <chrono>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <span>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "admin/admin_api.h"
#include "filters/bulkhead/concurrency_limit.h"
#include "healing/healing_loop.h"
#include "healing/healing_state.h"
#include "providers/snapshot.h"
#include "routing/balancer.h"
#include "server/session_host.h"
#include "discovery/dns_discovery.h"
#include "store/memory_store.h"
#include "telemetry/access_log_sink.h"
#include "telemetry/trace_exporter.h"
#include "telemetry/usage_exporter.h"
#include "tenants/tenant_directory.h"

namespace boost::asio {
class io_context;
namespace ssl {
class context;
}
}  // namespace boost::asio

namespace tahua {

class Worker;
class ResponseCache;
class KubeRuntime;
class RegionLink;

// Where the config comes from, so it can be read again on SIGHUP.
struct ConfigSource {
  std::string path;                          // empty: the built-in default
  std::optional<ListenerConfig> listen;      // --listen override
  bool watch = true;                         // reload when the file changes (inotify)
};

// Loads and validates the config and builds its snapshot. Errors name file, line and
// field; warnings (e.g. unset key variables) are appended to `warnings`.
std::variant<SnapshotPtr, std::string> loadSnapshot(const ConfigSource& source, std::vector<std::string>& warnings);

class Gateway final : private AdminHost, private HealingHost {
 public:
  Gateway(SnapshotPtr snapshot, ConfigSource source);
  ~Gateway();

  // Binds listeners, runs the workers until SIGTERM/SIGINT and the drain complete.
  // Returns the process exit code.
  int run();

  // Ready: config loaded (the worker's `config`), a provider usable, not draining, and
  // the Kubernetes resources listed (when they are watched).
  bool ready(const Config& config) const { return !draining() && config.anyProviderUsable() && resourcesListed(); }
  // False while watched Kubernetes resources are not listed yet; true when not watched.
  bool resourcesListed() const { return kube_listed_ == nullptr || kube_listed_->load(std::memory_order_relaxed); }
  bool draining() const override { return draining_.load(std::memory_order_relaxed); }
  // Merges every worker's metrics (each copied on its own thread) into Prometheus text.
  boost::asio::awaitable<std::string> renderMetrics() override;  // gateway_metrics.cpp

  // Concurrency caps shared by every worker (configured before a config is published).
  Bulkheads& bulkheads() { return bulkheads_; }
  StateStore& stateStore() { return *store_; }
  // The response cache's storage (made at the start of run(), before any worker).
  ResponseCache& responseCache() override { return *response_cache_; }

  // The admin API (src/admin/), called on the admin listener's worker.
  AdminApi& adminApi() { return admin_; }

 private:
  // SIGHUP / file change: read the config again; publish it to every worker if valid,
  // else keep serving the last good one.
  void reload(std::string_view trigger);
  // Publishes a freshly loaded config (clears admin overrides) or, with `loaded` null,
  // the current one again with the overrides applied. Caller holds mutex_. Returns an
  // error text if the snapshot cannot be built.
  std::optional<std::string> publish(ConfigPtr loaded, std::string_view trigger) override;

  // AdminHost: what the admin API asks of the gateway.
  std::mutex& lock() override { return mutex_; }
  const ConfigPtr& baseConfig() const override { return base_config_; }
  std::string healingJson() const override { return healing_.json(*snapshot_->config); }
  std::set<std::pair<std::string, std::string>> healingEjected() const override { return healing_.ejected(); }
  std::uint64_t generation() const override { return generation_.load(); }
  void countRejectedConfig() override { ++reloads_failed_; }
  const std::optional<ListenerConfig>& listenOverride() const override { return source_.listen; }
  boost::asio::awaitable<std::vector<std::vector<DeploymentState>>> collectDeploymentStates(const Config& config) override;
  boost::asio::awaitable<std::vector<std::string>> collectDraining(const Config& config) override;
  void publishNodes(NodeTablePtr table) override;
  StateStore& store() override { return *store_; }
  TenantDirectoryPtr tenants() const override;
  boost::asio::awaitable<void> publishTenants() override;
  // The store's records changed (another replica): rebuild and send to every worker.
  void tenantsChanged();
  // The store's resources differ from those in force: publish the config again with
  // them. Caller holds mutex_.
  void resourcesChanged() override;
  // The shared store's node reports differ from those merged: merge and send. Caller holds mutex_.
  void nodesChanged();
  // The same for registered endpoints (a change publishes the config again).
  void registrationsChanged();
  // One replica at a time (the store's lock): expired registrations and stale node
  // reports removed from the shared store. On a worker's thread.
  void sweepStore(Millis hold);
  // publish() helper: the base config with the store's resources (logs what it skipped).
  ConfigPtr withStoredResources(const ConfigPtr& base);
  // Builds the directory of `config` plus the store's records (notes logged).
  TenantDirectoryPtr buildTenants(const Config& config);
  // Binds one listener on the given workers (gateway.cpp). Nothing if it cannot.
  std::optional<std::uint16_t> bindListener(boost::asio::io_context& main_io, const std::string& address,
                                            std::uint16_t port, std::span<const std::unique_ptr<Worker>> workers,
                                            std::shared_ptr<boost::asio::ssl::context> tls, std::size_t max_sessions,
                                            bool admin);
  // HealingHost: what the self-healing loop (src/healing/healing_loop.cpp) asks.
  const Config& servedConfig() const override { return *snapshot_->config; }
  boost::asio::awaitable<HealthSample> collectHealth() override;
  boost::asio::awaitable<void> scale(HealingAction& action) override;
  // The Kubernetes resources' watch found a change: publish with them (their thread).
  void kubernetesResourcesChanged(std::vector<StoredResource> resources);

  ConfigSource source_;
  // Guards what reloads and the admin API change: the main thread (signals, file watch)
  // and the admin listener's worker both publish.
  mutable std::mutex mutex_;
  SnapshotPtr snapshot_;  // the last good one published (workers have their own copy)
  ConfigPtr base_config_;  // as loaded, before admin overrides
  AdminApi admin_{*this};  // its canary overrides and node table (under mutex_)
  Bulkheads bulkheads_;
  // Limit counters (and, to come, keys and idempotency records) shared by the workers;
  // in-process for now, Redis with many replicas.
  std::unique_ptr<StateStore> store_ = std::make_unique<MemoryStore>();
  std::unique_ptr<ResponseCache> response_cache_;
  TenantDirectoryPtr tenants_;  // the last one published (under mutex_)
  std::vector<StateStore::Record> resources_;  // the store's resources in force (under mutex_)
  // The Kubernetes API link (config `kubernetes`, set up at start) and the resources its
  // watch found (under mutex_); they go before the store's of the same Kind/name.
  std::unique_ptr<KubeRuntime> kube_;
  // Several regions (config `region`): pushes this region's records and quota use to the
  // peers' Redis (set up at start; a reload does not move it).
  std::unique_ptr<RegionLink> region_;
  std::vector<StoredResource> kube_resources_;
  const std::atomic<bool>* kube_listed_ = nullptr;  // set before the workers start
  // Endpoints of deployments named by DNS; its changes publish the config again.
  std::unique_ptr<DnsDiscovery> discovery_;
  std::vector<StateStore::Record> registration_records_;  // the store's registrations last merged (under mutex_)
  std::optional<std::chrono::system_clock::time_point> next_expiry_;  // the soonest registration to expire (under mutex_)
  std::vector<StateStore::Record> node_records_;  // the store's node reports last merged (under mutex_)
  std::string resources_report_;  // what was last logged about them, so a change logs once
  HealingState healing_;  // self-healing's rules, actions in force and audit trail (under mutex_)
  // Set up at start from the first config (a reload does not move them), before the
  // workers that hand them spans and records: destroyed after them.
  std::unique_ptr<TraceExporter> traces_;
  std::unique_ptr<UsageExporter> usage_;
  std::shared_ptr<LogFile> access_log_;
  const std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();  // process_start_time_seconds
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> draining_{false};
  std::atomic<std::uint64_t> reloads_ok_{0};
  std::atomic<std::uint64_t> reloads_failed_{0};
  std::atomic<std::uint64_t> generation_{1};
};

}  // namespace tahua
