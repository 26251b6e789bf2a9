#include "runtime/gateway.h"

#include "cache/response_cache.h"


#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <sys/socket.h>

#include <map>
#include <thread>

#include "cache/response_cache.h"
#include "cloud_auth/token_cache.h"
#include "core/error.h"
#include "config/config_watcher.h"
#include "core/log.h"
#include "core/malloc_tuning.h"
#include "kubernetes/kube_runtime.h"
#include "regions/region_link.h"
#include "runtime/worker.h"
#include "server/session.h"
#include "store/redis/redis_store.h"

namespace tahua {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

// Over the connection limit: a best-effort 503 written without reading the request
// (allowed by HTTP/1.1 for a server that is about to close), then close.
void rejectConnection(tcp::socket& socket) {
  static const std::string kReply = [] {
    const std::string body = Error{ErrorKind::Overloaded, "The gateway has too many open connections."}.toJson();
    return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  boost::system::error_code ec;
  socket.non_blocking(true, ec);
  if (!ec) ::send(socket.native_handle(), kReply.data(), kReply.size(), MSG_NOSIGNAL);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

// The admin listener's connection cap (and its listen backlog): a handful of operators.
constexpr std::size_t kAdminSessions = 64;

asio::awaitable<void> acceptLoop(Worker& worker, std::shared_ptr<tcp::acceptor> acceptor,
                                 std::shared_ptr<asio::ssl::context> tls, std::size_t max_sessions, bool admin) {
  asio::steady_timer backoff(acceptor->get_executor());
  std::chrono::steady_clock::time_point last_warning{};
  const auto admit = [&](tcp::socket socket) {
    if (static_cast<std::size_t>(worker.liveSessions(admin)) >= max_sessions) {
      ++worker.metrics().connections_rejected;
      rejectConnection(socket);
      return;
    }
    startSession(worker, std::move(socket), tls, admin);
  };
  // The extra accepts below must not block.
  boost::system::error_code nb;
  acceptor->non_blocking(true, nb);
  for (;;) {
    auto [ec, socket] = co_await acceptor->async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) co_return;
      // Out of file descriptors or similar: back off instead of spinning, and say why
      // (at most once a second).
      if (auto now = std::chrono::steady_clock::now(); now - last_warning >= std::chrono::seconds(1)) {
        last_warning = now;
        log::warn("accept failed; backing off (raise ulimit -n if out of descriptors)", {{"error", ec.message()}});
      }
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    admit(std::move(socket));
    // Then every connection already waiting, up to a bound (nginx's multi_accept): in a
    // burst of new streams each accept would otherwise wait a whole round of the event
    // loop behind the streams being relayed. An error here shows on the next wait.
    for (int i = 0; i < 64 && !nb; ++i) {
      boost::system::error_code more_ec;
      tcp::socket more = acceptor->accept(more_ec);
      if (more_ec) break;
      admit(std::move(more));
    }
  }
}

std::shared_ptr<asio::ssl::context> makeServerTls(const ServerTlsConfig& cfg, std::string& error) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
  ctx->use_certificate_chain_file(cfg.cert_file, ec);
  if (ec) {
    error = "cannot load certificate \"" + cfg.cert_file + "\": " + ec.message();
    return nullptr;
  }
  ctx->use_private_key_file(cfg.key_file, asio::ssl::context::pem, ec);
  if (ec) {
    error = "cannot load private key \"" + cfg.key_file + "\": " + ec.message();
    return nullptr;
  }
  return ctx;
}

}  // namespace

std::variant<SnapshotPtr, std::string> loadSnapshot(const ConfigSource& source, std::vector<std::string>& warnings) {
  auto result = source.path.empty() ? loadConfigString(defaultConfigYaml(), "<built-in>")
                                     : loadConfigFile(source.path, source.listen.has_value());
  if (!result.config) return result.error;
  warnings.insert(warnings.end(), result.warnings.begin(), result.warnings.end());
  if (source.listen) {
    auto copy = std::make_shared<Config>(*result.config);
    copy->listeners = {*source.listen};
    result.config = copy;
  }
  return buildSnapshot(result.config);
}

Gateway::Gateway(SnapshotPtr snapshot, ConfigSource source)
    : source_(std::move(source)), snapshot_(std::move(snapshot)), base_config_(snapshot_->config) {
  // The first config is generation 1 (built once more with its number; it built before).
  auto cfg = std::make_shared<Config>(*snapshot_->config);
  cfg->generation = 1;
  if (auto built = buildSnapshot(cfg); std::holds_alternative<SnapshotPtr>(built)) snapshot_ = std::get<SnapshotPtr>(built);
  bulkheads_.configure(*snapshot_->config);
  healing_.configure(*snapshot_->config, generation_.load() + 1);
}

namespace {
// "a.b, c" for every restart-only field whose YAML differs, a section's fields under it
// once; a section being turned off (tracing, usage, the access log) is not a change.
std::string restartFieldsChanged(const Config& before, const Config& after) {
  std::map<std::string_view, std::string_view> old_values;
  for (const auto& [path, yaml] : before.restart_fields) old_values.emplace(path, yaml);
  std::map<std::string_view, std::string_view> new_values;
  for (const auto& [path, yaml] : after.restart_fields) new_values.emplace(path, yaml);
  const auto off = [&](std::string_view path) {
    return (path.starts_with("tracing.") && !after.tracing.enabled) ||
           (path.starts_with("usage.") && !after.usage.enabled) ||
           (path.starts_with("access_log.") && !after.access_log.enabled);
  };
  std::vector<std::string_view> changed;
  const auto note = [&](std::string_view path) {
    if (off(path)) return;
    for (auto p : changed)  // a field inside a section already named
      if (path.starts_with(p) && path.size() > p.size() && (path[p.size()] == '.' || path[p.size()] == '['))
        return;
    changed.push_back(path);
  };
  for (const auto& [path, yaml] : new_values)
    if (auto it = old_values.find(path); it == old_values.end() || it->second != yaml) note(path);
  for (const auto& [path, yaml] : old_values)
    if (!new_values.contains(path)) note(path);
  std::string out;
  for (auto p : changed) out.append(out.empty() ? "" : ", ").append(p);
  return out;
}
}  // namespace

void Gateway::reload(std::string_view trigger) {
  std::vector<std::string> warnings;
  auto loaded = loadSnapshot(source_, warnings);
  if (auto* error = std::get_if<std::string>(&loaded)) {
    ++reloads_failed_;
    log::error("config reload failed; still serving the previous config", {{"error", *error}, {"trigger", trigger}});
    return;
  }
  for (const auto& w : warnings) log::warn(w);
  {
    std::lock_guard lock(mutex_);
    if (auto error = publish(std::get<SnapshotPtr>(loaded)->config, trigger)) {
      ++reloads_failed_;
      log::error("config reload failed; still serving the previous config", {{"error", *error}, {"trigger", trigger}});
    }
  }
  // Parsing a large config (thousands of resources) leaves free memory in the main
  // thread's arena that the allocator keeps; give it back (a reload is rare, this costs ~ms).
  releaseFreeMemory();
}

std::optional<std::string> Gateway::publish(ConfigPtr loaded, std::string_view trigger) {
  if (loaded) {
    base_config_ = loaded;
    admin_.configReplaced();  // the newest action wins: a new config replaces admin changes
    // Self-healing actions stay in force across reloads while their rule does.
    healing_.configure(*loaded, generation_.load() + 1);
  }
  // File, then the store's resources, then the admin API's overrides (docs/tenants-and-limits.md).
  auto cfg = std::make_shared<Config>(*withStoredResources(base_config_));
  admin_.applyOverrides(*cfg);
  healing_.applyOverrides(*cfg);
  // Deployments named by DNS: one per endpoint found (discovery/dns_discovery.h).
  if (discovery_) {
    discovery_->configure(*cfg);
    expandEndpoints(*cfg, *discovery_->endpoints(), std::chrono::steady_clock::now());
  }
  // Registered endpoints (admin/endpoint_admin.h), each a deployment until it expires.
  const auto wall = std::chrono::system_clock::now();
  next_expiry_ = addRegistrations(*cfg, admin_.endpoints().registrations(wall), wall);
  cfg->generation = generation_.load() + 1;
  auto built = buildSnapshot(cfg);
  if (auto* error = std::get_if<std::string>(&built)) return *error;
  SnapshotPtr next = std::get<SnapshotPtr>(std::move(built));
  const Config& old_cfg = *snapshot_->config;
  const Config& new_cfg = *next->config;
  // Sockets, threads, the store and the exporters are set up once: a reload names every
  // field marked "restart" in the reference whose value changed, instead of ignoring it.
  if (auto changed = restartFieldsChanged(old_cfg, new_cfg); !changed.empty())
    log::warn("config reload: these fields change only at a restart; the running values stay",
              {{"fields", changed}});
  snapshot_ = next;
  bulkheads_.configure(new_cfg);  // before any worker builds its chain from the new config
  TenantDirectoryPtr tenants = tenants_ = buildTenants(new_cfg);
  for (auto& worker : workers_)
    asio::post(worker->io(), [w = worker.get(), next, tenants] { w->setSnapshot(next, tenants); });
  ++reloads_ok_;
  auto generation = ++generation_;
  log::info("config reloaded", {{"config", new_cfg.source}, {"trigger", trigger}, {"generation", generation},
                                 {"models", new_cfg.models.size()}, {"providers", new_cfg.providers.size()}});
  return std::nullopt;
}

TenantDirectoryPtr Gateway::buildTenants(const Config& config) {
  std::vector<std::string> notes;
  auto dir = buildTenantDirectory(config, store_->records(kTenantRecords), store_->records(kKeyRecords), notes);
  for (const auto& n : notes) log::warn(n);
  bulkheads_.configureTenants(*dir);  // before any worker builds its chain from it
  return dir;
}

TenantDirectoryPtr Gateway::tenants() const {
  std::lock_guard lock(mutex_);
  return tenants_;
}

void Gateway::tenantsChanged() {
  std::lock_guard lock(mutex_);
  TenantDirectoryPtr dir = tenants_ = buildTenants(*snapshot_->config);
  for (auto& worker : workers_) asio::post(worker->io(), [w = worker.get(), dir] { w->setTenants(dir); });
}

asio::awaitable<void> Gateway::publishTenants() {
  TenantDirectoryPtr dir;
  {
    std::lock_guard lock(mutex_);
    dir = tenants_ = buildTenants(*snapshot_->config);
  }
  for (auto& worker : workers_) {
    Worker* w = worker.get();
    // A named awaitable: GCC 12 mishandles temporaries with destructors (the lambda's
    // shared_ptr) inside a co_await expression.
    auto apply = [w, dir]() -> asio::awaitable<void> {
      w->setTenants(dir);
      co_return;
    };
    auto op = asio::co_spawn(w->io(), std::move(apply), asio::use_awaitable);
    co_await std::move(op);
  }
}

void Gateway::publishNodes(NodeTablePtr table) {
  for (auto& worker : workers_) asio::post(worker->io(), [w = worker.get(), table] { w->setNodes(table); });
}

namespace {

// One worker's deployment counters, read on its own thread.
asio::awaitable<HealthSample> workerHealth(Worker* w) {
  HealthSample out;
  const Config& cfg = *w->snapshot()->config;
  const auto now = SteadyClock::now();
  for (const auto& m : cfg.models)
    for (const auto& d : m.deployments) {
      const DeploymentState* s = w->deployments().find(m.name, d.id);
      const NodeStatus* node = liveStatus(w->nodes().get(), d.node, m.gpu, now);
      if (!s && !node) continue;
      HealthCounters& c = out[{m.name, d.id}];
      if (s) {
        c.requests = s->requests;
        c.failures = s->failures;
        c.ttft = s->ttft_buckets;
      }
      if (node) c.node = NodeGauges{100 * node->gpu_memory, 100 * node->gpu_util, node->queued_requests};
    }
  co_return out;
}

}  // namespace

asio::awaitable<HealthSample> Gateway::collectHealth() {
  HealthSample sample;
  for (auto& worker : workers_) {
    Worker* w = worker.get();
    HealthSample part = co_await asio::co_spawn(w->io(), workerHealth(w), asio::use_awaitable);
    for (const auto& [key, c] : part) {
      HealthCounters& into = sample[key];
      into.requests += c.requests;
      into.failures += c.failures;
      for (std::size_t i = 0; i < into.ttft.size(); ++i) into.ttft[i] += c.ttft[i];
      if (c.node) into.node = c.node;  // every worker holds the same node table
    }
  }
  co_return sample;
}


asio::awaitable<void> Gateway::scale(HealingAction& a) {
  if (!kube_) {  // the loader requires the section with a scale rule; a reload may have added both
    a.error = "no Kubernetes API: the kubernetes section was not in the config the process started with";
    co_return;
  }
  const ScaleOrder order{a.scale.deployment, a.fire, a.scale.replicas, a.scale.min, a.scale.max};
  ScaleResult r = co_await kube_->scale(order);
  a.replicas_from = r.from;
  a.replicas_to = r.to;
  a.error = std::move(r.error);
}

asio::awaitable<std::vector<std::vector<DeploymentState>>> Gateway::collectDeploymentStates(const Config& config) {
  std::vector<std::vector<DeploymentState>> all;
  for (auto& worker : workers_) {
    Worker* w = worker.get();
    auto copy = co_await asio::co_spawn(
        w->io(),
        [w, &config]() -> asio::awaitable<std::vector<DeploymentState>> {
          std::vector<DeploymentState> out(config.deployment_count);
          for (const auto& m : config.models)
            for (const auto& d : m.deployments)
              if (const DeploymentState* s = w->deployments().find(m.name, d.id)) out[d.index] = *s;
          co_return out;
        },
        asio::use_awaitable);
    all.push_back(std::move(copy));
  }
  co_return all;
}

asio::awaitable<std::vector<std::string>> Gateway::collectDraining(const Config& config) {
  std::vector<std::string> all;
  for (auto& worker : workers_) {
    Worker* w = worker.get();
    auto copy = co_await asio::co_spawn(
        w->io(), [w, &config]() -> asio::awaitable<std::vector<std::string>> { co_return w->deployments().draining(config); },
        asio::use_awaitable);
    all.insert(all.end(), copy.begin(), copy.end());
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  co_return all;
}

Gateway::~Gateway() {
  // Discovery's thread publishes configs (to the workers, under mutex_): it stops first,
  // whatever way run() ended.
  discovery_.reset();
}

// One listener: an acceptor on `address:port` for each of `workers` (SO_REUSEPORT when
// there are several; port 0 picks one, which the others join), each running acceptLoop
// with `max_sessions` as that worker's share. Returns the bound port, or nothing after
// logging why not.
std::optional<std::uint16_t> Gateway::bindListener(asio::io_context& main_io, const std::string& address_text,
                                                   std::uint16_t port, std::span<const std::unique_ptr<Worker>> workers,
                                                   std::shared_ptr<asio::ssl::context> tls, std::size_t max_sessions,
                                                   bool admin) {
  const char* what = admin ? "cannot listen (admin)" : "cannot listen";
  boost::system::error_code ec;
  auto address = asio::ip::make_address(address_text, ec);
  if (ec) {
    log::error(admin ? "invalid admin listener address" : "invalid listener address", {{"address", address_text}});
    return std::nullopt;
  }
  // SO_REUSEPORT would let us join a port another process already listens on (and
  // silently share its traffic). Probe with a plain bind first: busy means refuse.
  if (port != 0) {
    tcp::acceptor probe(main_io);
    tcp::endpoint ep(address, port);
    probe.open(ep.protocol(), ec);
    if (!ec) probe.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) probe.bind(ep, ec);
    if (ec) {
      log::error("cannot listen: address in use or not available",
                 {{"address", address_text}, {"port", port}, {"error", ec.message()}});
      return std::nullopt;
    }
  }
  const bool reuse_port = workers.size() > 1;
  for (const auto& worker : workers) {
    auto acceptor = std::make_shared<tcp::acceptor>(worker->io());
    tcp::endpoint ep(address, port);
    acceptor->open(ep.protocol(), ec);
    if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec && reuse_port) acceptor->set_option(ReusePort(true), ec);
    if (!ec) acceptor->bind(ep, ec);
    if (!ec) acceptor->listen(admin ? static_cast<int>(kAdminSessions) : asio::socket_base::max_listen_connections, ec);
    if (ec) {
      log::error(what, {{"address", address_text}, {"port", port}, {"error", ec.message()}});
      return std::nullopt;
    }
    if (port == 0) port = acceptor->local_endpoint().port();  // the others join this port
    asio::co_spawn(worker->io(), acceptLoop(*worker, acceptor, tls, max_sessions, admin), asio::detached);
    worker->addAcceptorTask([acceptor] {
      boost::system::error_code ignored;  // already closed is fine
      acceptor->close(ignored);
    });
  }
  return port;
}

int Gateway::run() {
  // The main thread only waits for signals and orchestrates the drain. The handler is
  // installed before any listener exists, so a SIGTERM right after start is a drain,
  // never a kill by the default action.
  asio::io_context main_io{1};
  asio::signal_set signals(main_io, SIGTERM, SIGINT);
  asio::signal_set hangup(main_io, SIGHUP);
  // A change of the config file's bytes reloads it too (editors, ConfigMap updates).
  // Started before the listeners announce themselves, so no change after "listening"
  // can slip by unseen.
  std::unique_ptr<ConfigWatcher> watcher;
  if (source_.watch && !source_.path.empty()) {
    watcher = std::make_unique<ConfigWatcher>(main_io, source_.path, [this] { reload("file"); });
    std::string watch_error;
    if (!watcher->start(&watch_error)) {
      log::warn("not watching the config file; reload with SIGHUP", {{"error", watch_error}});
      watcher.reset();
    }
  }
  const SnapshotPtr first = snapshot_;  // keeps `cfg` alive when the store's resources publish another
  const Config& cfg = *first->config;
  unsigned n = cfg.server.workers ? cfg.server.workers : std::max(1u, std::thread::hardware_concurrency());

  std::string error;
  access_log_ = LogFile::open(cfg.access_log.path, cfg.access_log.max_pending_bytes, &error);
  if (!access_log_) {
    log::error(error);
    return 1;
  }
  // The response cache: its in-process bound and shared layer are read once, at start.
  response_cache_ = std::make_unique<ResponseCache>(cfg.cache.max_bytes, unixMillis);
  response_cache_->configureSemantic(cfg.cache.semantic_max_entries, cfg.cache.semantic_max_entries_per_tenant);
  if (!cfg.cache.redis_url.empty()) {
    if (auto err = response_cache_->configureRedis(cfg.cache.redis_url, cfg.cache.redis_timeout)) {
      log::error(*err);
      return 1;
    }
  }
  // The store before anything reads it: what the journal (or Redis) kept is in force at once.
  RedisStore* redis = nullptr;
  if (cfg.store.type == StoreConfig::Type::Redis) {
    auto store = std::make_unique<RedisStore>(cfg.store.redis);
    store->filterLookups(cfg.store.lookups);
    store->setRegion(cfg.region.name);
    std::vector<std::string> warnings;
    if (!store->start(error, warnings)) {
      log::error("cannot use the Redis store", {{"error", error}});
      return 1;
    }
    for (const auto& w : warnings) log::warn(w);
    redis = store.get();
    store_ = std::move(store);
  } else if (!cfg.store.journal.empty()) {
    std::vector<std::string> warnings;
    if (!static_cast<MemoryStore&>(*store_).openJournal(cfg.store.journal, cfg.store.flush_interval, warnings, error)) {
      log::error("cannot open the state journal", {{"error", error}});
      return 1;
    }
    for (const auto& w : warnings) log::warn(w);
  }
  // Several regions: off the request path, on its own thread.
  if (!cfg.region.name.empty()) {
    region_ = std::make_unique<RegionLink>(cfg.region, cfg.store.redis);
    region_->start();
    log::info("region", {{"name", cfg.region.name}, {"peers", cfg.region.peers.size()}});
  }
  // The exporters, before the workers that feed them.
  if (cfg.tracing.enabled) {
    traces_ = TraceExporter::start(cfg.tracing, error);
    if (!traces_) {
      log::error("cannot export traces", {{"error", error}});
      return 1;
    }
  }
  if (cfg.usage.enabled) {
    usage_ = UsageExporter::start(cfg.usage, error);
    if (!usage_) {
      log::error("cannot export usage records", {{"error", error}});
      return 1;
    }
  }
  // Cloud access tokens (vertex providers): fetched and refreshed on their own thread,
  // from before the first request on.
  cloud_auth::TokenCache::process().start();
  // The Kubernetes API: its own thread. With `kubernetes.resources`, /readyz waits for
  // every kind's first list, and each change publishes the config again.
  if (cfg.kubernetes.enabled) {
    if (!cfg.kubernetes.unresolved.empty()) {
      log::error("cannot reach the Kubernetes API", {{"error", cfg.kubernetes.unresolved}});
      return 1;
    }
    kube_ = std::make_unique<KubeRuntime>(cfg.kubernetes);
    if (cfg.kubernetes.resources) kube_listed_ = &kube_->stats().listed;
    kube_->start(cfg.kubernetes.resources
                     ? KubeResourceWatch::Changed([this](std::vector<StoredResource> r) { kubernetesResourcesChanged(std::move(r)); })
                     : KubeResourceWatch::Changed());
    log::info("kubernetes API", {{"api_server", cfg.kubernetes.api_server}, {"namespace", cfg.kubernetes.namespace_},
                                 {"resources", cfg.kubernetes.resources}});
  }
  // DNS discovery: resolved off the workers; every change of endpoints publishes the
  // config again (before the first answer, a deployment is used as configured).
  discovery_ = std::make_unique<DnsDiscovery>([this] {
    std::lock_guard lock(mutex_);
    if (auto error = publish(nullptr, "dns")) {
      ++reloads_failed_;
      log::error("config with the discovered endpoints failed; still serving the previous config", {{"error", *error}});
    }
  });
  {
    std::lock_guard lock(mutex_);
    discovery_->configure(*snapshot_->config);
    resourcesChanged();  // the store's resources are in force before the first request
    tenants_ = buildTenants(*snapshot_->config);
    // Under the lock: discovery may publish from its thread now, and a publish sends the
    // new snapshot to the workers there are (a worker made meanwhile would miss it).
    for (unsigned i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>(i, n, *this, snapshot_, tenants_, access_log_,
                                                  traces_ ? &traces_->queue() : nullptr, usage_ ? &usage_->queue() : nullptr));
    nodesChanged();  // node reports other replicas wrote to the shared store
    registrationsChanged();  // and the endpoints registered with them
  }
  // Each worker's own Redis connection, made on its thread before it serves anything.
  if (redis)
    for (auto& worker : workers_) asio::post(worker->io(), [redis, w = worker.get()] { redis->attach(w->io()); });
  if (response_cache_->shared())
    for (auto& worker : workers_)
      asio::post(worker->io(), [cache = response_cache_.get(), w = worker.get()] { cache->attach(w->io()); });
  // Another replica changed tenants or keys: every worker gets the new directory.
  store_->onRecordsChanged([this] {
    tenantsChanged();
    std::lock_guard lock(mutex_);
    resourcesChanged();
    nodesChanged();
    registrationsChanged();
  });

  // Every worker gets its own acceptor on each public address (SO_REUSEPORT): the kernel
  // spreads new connections across them, and no accept lock is shared. Each worker takes
  // its share of the connection limit (SO_REUSEPORT spreads evenly).
  for (const auto& lc : cfg.listeners) {
    std::shared_ptr<asio::ssl::context> tls;
    if (lc.tls) {
      tls = makeServerTls(*lc.tls, error);
      if (!tls) {
        log::error(error, {{"address", lc.address}, {"port", lc.port}});
        return 1;
      }
    }
    const std::size_t per_worker = (cfg.server.max_connections + n - 1) / n;
    const auto port = bindListener(main_io, lc.address, lc.port, workers_, tls, per_worker, false);
    if (!port) return 1;
    log::info("listening", {{"address", lc.address}, {"port", *port}, {"tls", lc.tls.has_value()}, {"workers", n}});
  }
  // The admin API: its own address (never the public listener), on the first worker
  // (a handful of requests; no reason to spread them).
  if (cfg.admin.enabled) {
    const auto port = bindListener(main_io, cfg.admin.listener.address, cfg.admin.listener.port,
                                   std::span(workers_.data(), 1), nullptr, kAdminSessions, true);
    if (!port) return 1;
    log::info("admin listening", {{"address", cfg.admin.listener.address}, {"port", *port}});
  }

  // Self-healing rules are evaluated on the first worker (a few microseconds per interval).
  asio::co_spawn(workers_[0]->io(), runHealingLoop(healing_, *this), asio::detached);

  std::vector<std::thread> threads;
  for (auto& worker : workers_) threads.emplace_back([w = worker.get()] { w->run(); });
  asio::steady_timer deadline(main_io);
  asio::steady_timer grace(main_io);
  asio::steady_timer poll(main_io);
  bool deadline_passed = false;
  // SIGHUP reloads the config (until the drain starts).
  std::function<void()> waitHangup = [&] {
    hangup.async_wait([&](boost::system::error_code ec, int) {
      if (ec || draining()) return;
      reload("SIGHUP");
      if (watcher) watcher->rebase();  // the file watch need not reload the same bytes again
      waitHangup();
    });
  };
  waitHangup();
  // Registered endpoints leave the config when their TTL passes without a renewal; once a
  // minute one replica (the distributed lock's holder) removes expired registrations and
  // hour-old node reports from the shared store.
  asio::steady_timer expiry(main_io);
  auto next_sweep = std::chrono::steady_clock::now() + cfg.store.redis.sweep;
  std::function<void()> watchExpiry = [&] {
    expiry.expires_after(std::chrono::seconds(1));
    expiry.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      {
        std::lock_guard lock(mutex_);
        if (next_expiry_ && *next_expiry_ <= std::chrono::system_clock::now())
          if (auto error = publish(nullptr, "registration expired")) log::error("config after an expiry failed", {{"error", *error}});
      }
      if (std::chrono::steady_clock::now() >= next_sweep && store_->stats().shared && !workers_.empty()) {
        next_sweep = std::chrono::steady_clock::now() + cfg.store.redis.sweep;
        // The store's lock runs on a worker's connection; held half an interval (it expires
        // on its own), so one replica sweeps per interval.
        asio::post(workers_[0]->io(), [this, hold = cfg.store.redis.sweep / 2] { sweepStore(hold); });
      }
      watchExpiry();
    });
  };
  watchExpiry();
  auto finish = [&] {
    grace.cancel();
    expiry.cancel();
    if (watcher) watcher->stop();
    hangup.cancel();
    signals.cancel();
    deadline.cancel();
    poll.cancel();
    // What a worker holds for the store (calibrations, leases) goes out before it stops.
    for (auto& worker : workers_)
      asio::post(worker->io(), [this, w = worker.get()] { store_->flushWorker([w] { w->stop(); }); });
  };
  std::function<void()> pollSessions = [&] {
    int live = 0;
    for (auto& worker : workers_) live += worker->liveSessions();
    if (live == 0) return finish();
    poll.expires_after(std::chrono::milliseconds(20));
    poll.async_wait([&](boost::system::error_code ec) {
      if (!ec) pollSessions();
    });
  };
  signals.async_wait([&](boost::system::error_code ec, int signo) {
    if (ec) return;
    // The config in force now (a reload may have replaced the one we started with).
    ServerConfig server;
    {
      std::lock_guard lock(mutex_);  // the admin API may publish concurrently
      server = snapshot_->config->server;
    }
    draining_.store(true, std::memory_order_relaxed);  // /readyz says 503 from now on
    log::info("draining", {{"signal", signo},
                           {"drain_timeout_ms", server.drain_timeout.count()},
                           {"accept_grace_ms", server.drain_accept_grace.count()}});
    // Keep accepting for a moment so a load balancer sees /readyz fail before
    // connections are refused; then close listeners and idle connections.
    grace.expires_after(server.drain_accept_grace);
    grace.async_wait([&](boost::system::error_code ec2) {
      if (ec2) return;
      for (auto& worker : workers_) asio::post(worker->io(), [w = worker.get()] { w->beginDrain(); });
      pollSessions();
    });
    deadline.expires_after(server.drain_timeout);
    deadline.async_wait([&](boost::system::error_code ec2) {
      if (ec2) return;
      deadline_passed = true;
      log::warn("drain deadline passed; ending remaining requests");
      for (auto& worker : workers_) asio::post(worker->io(), [w = worker.get()] { w->drainDeadline(); });
      // Give the final events a moment to be written, then stop regardless.
      deadline.expires_after(std::chrono::seconds(5));
      deadline.async_wait([&](boost::system::error_code ec3) {
        if (!ec3) finish();
      });
    });
    // A second signal during the drain stops at once. (Armed before polling: the poll
    // may finish() right away, and finish() cancels this wait.)
    signals.async_wait([&](boost::system::error_code ec2, int) {
      if (!ec2) finish();
    });
  });
  main_io.run();
  discovery_.reset();  // its thread publishes configs: stopped before the workers go
  if (kube_) kube_->stop();  // the same
  if (region_) region_->stop();
  for (auto& t : threads) t.join();
  cloud_auth::TokenCache::process().stop();  // after the workers: none waits for a token any more
  // The workers handed over what they held: every usage record goes to its sinks (or
  // their spill files) and the last spans are sent before the process exits.
  if (usage_) usage_->stop();
  traces_.reset();
  log::info("stopped", {{"drain_deadline_passed", deadline_passed}});
  return 0;
}

}  // namespace tahua
