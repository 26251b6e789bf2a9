// /metrics: every worker's counters merged, then what the gateway itself knows (config,
// store, discovery, deployments' states, bulkheads, exporters, the process). Apart from
// gateway.cpp (startup, reload, drain): rendering is a concern of its own.
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <fstream>

#include "runtime/gateway.h"

#include "cache/response_cache.h"
#include "kubernetes/kube_runtime.h"
#include "regions/region_link.h"
#include "runtime/worker.h"
#include "store/redis/redis_stats.h"
#include "telemetry/metrics.h"

namespace tahua {

namespace asio = boost::asio;

namespace {

// A worker's metrics, copied on its own thread, with the breaker gauges read from its
// routing state (gauges are read at scrape time, not kept on the request path).
asio::awaitable<WorkerMetrics> workerMetrics(Worker* w) {
  WorkerMetrics m = w->metrics();
  const auto now = std::chrono::steady_clock::now();
  const Snapshot& snap = *w->snapshot();
  for (const auto& model : snap.config->models)
    for (const auto& d : model.deployments) {
      if (!snap.providers[d.provider_index].config->circuit_breaker.enabled) continue;
      const DeploymentState* s = w->deployments().find(model.name, d.id);
      auto& n = m.breaker_states[{d.provider, d.id}];
      if (!s || s->breaker.state == Breaker::State::Closed) ++n[0];
      else if (s->breaker.state == Breaker::State::Open && s->breaker.open_until > now) ++n[1];
      else ++n[2];
    }
  co_return m;
}

}  // namespace


namespace {

// The process_* families every Prometheus client library exports (from /proc).
void processMetrics(std::string& text, std::chrono::system_clock::time_point started) {
  auto single = [&text](const char* name, const char* type, const char* help, const std::string& value) {
    text.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ").append(type);
    text.append("\n").append(name).append(" ").append(value).append("\n");
  };
  char buf[64];
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  std::snprintf(buf, sizeof buf, "%.6f", cpu);
  single("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", buf);
  long pages = 0, resident = 0;
  if (std::ifstream statm("/proc/self/statm"); statm >> pages >> resident)
    single("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
           std::to_string(resident * sysconf(_SC_PAGESIZE)));
  long fds = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++fds;
    closedir(d);
    --fds;  // the descriptor opendir itself holds
  }
  single("process_open_fds", "gauge", "Number of open file descriptors.", std::to_string(fds));
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  single("process_max_fds", "gauge", "Maximum number of open file descriptors.", std::to_string(rl.rlim_cur));
  std::snprintf(buf, sizeof buf, "%.3f", std::chrono::duration<double>(started.time_since_epoch()).count());
  single("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", buf);
}

void exporterMetrics(std::string& text, const TraceExporter* traces, const UsageExporter* usage, const LogFile* log) {
  auto family = [&text](const char* name, const char* type, const char* help) {
    text.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ").append(type).append("\n");
  };
  auto line = [&text](const std::string& series, std::uint64_t v) { text += series + " " + std::to_string(v) + "\n"; };
  const TraceExporter::Stats ts = traces ? traces->stats() : TraceExporter::Stats{};
  family("tahua_trace_spans_exported_total", "counter", "Spans the OTLP collector accepted.");
  line("tahua_trace_spans_exported_total", ts.exported);
  family("tahua_trace_spans_dropped_total", "counter", "Spans dropped: the export queue was full or the export failed.");
  line("tahua_trace_spans_dropped_total", ts.dropped);
  family("tahua_trace_export_failures_total", "counter", "OTLP export requests that failed.");
  line("tahua_trace_export_failures_total", ts.failures);
  family("tahua_trace_export_queue_depth", "gauge", "Spans waiting for export.");
  line("tahua_trace_export_queue_depth", ts.depth);

  const UsageExporter::Stats us = usage ? usage->stats() : UsageExporter::Stats{};
  family("tahua_usage_records_total", "counter", "Usage records handed to the exporter.");
  line("tahua_usage_records_total", us.records);
  family("tahua_usage_export_queue_depth", "gauge", "Usage records waiting for the exporter.");
  line("tahua_usage_export_queue_depth", us.depth);
  family("tahua_usage_records_dropped_total", "counter",
         "Usage records lost: reason queue_full (the exporter's queue, behind by usage.max_queue_records), "
         "spill_full (a sink's spill past usage.spill_max_bytes, or not writable), crashed (an earlier run "
         "died with them in memory).");
  line("tahua_usage_records_dropped_total{reason=\"queue_full\",sink=\"\"}", us.dropped_queue);
  line("tahua_usage_records_dropped_total{reason=\"crashed\",sink=\"\"}", us.lost_at_start);
  for (const auto& k : us.sinks) {
    line("tahua_usage_records_dropped_total{reason=\"spill_full\",sink=\"" + escapeLabel(k.name) + "\"}", k.dropped);
  }
  family("tahua_usage_sink_delivered_total", "counter", "Usage records a sink took (replays from its spill included).");
  for (const auto& k : us.sinks) line("tahua_usage_sink_delivered_total{sink=\"" + escapeLabel(k.name) + "\"}", k.delivered);
  family("tahua_usage_sink_failures_total", "counter", "Deliveries to a sink that failed (the records were spilled).");
  for (const auto& k : us.sinks) line("tahua_usage_sink_failures_total{sink=\"" + escapeLabel(k.name) + "\"}", k.failures);
  family("tahua_usage_sink_up", "gauge", "Whether a sink's last delivery succeeded (1) or its records are spilling (0).");
  for (const auto& k : us.sinks) line("tahua_usage_sink_up{sink=\"" + escapeLabel(k.name) + "\"}", k.up ? 1 : 0);
  family("tahua_usage_spill_bytes", "gauge", "Bytes in a sink's spill file, waiting to be replayed.");
  for (const auto& k : us.sinks) line("tahua_usage_spill_bytes{sink=\"" + escapeLabel(k.name) + "\"}", k.spill_bytes);

  family("tahua_log_lines_dropped_total", "counter", "Access-log lines dropped: the writer was behind by access_log.max_pending_bytes.");
  line("tahua_log_lines_dropped_total", log ? log->droppedLines() : 0);
}

void redisMetrics(std::string& text) {
  RedisCommandStats& r = RedisCommandStats::global();
  auto family = [&text](const char* name, const char* type, const char* help) {
    text.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ").append(type).append("\n");
  };
  family("tahua_redis_commands_total", "counter", "Commands sent to the Redis store.");
  text += "tahua_redis_commands_total " + std::to_string(r.commands.load()) + "\n";
  family("tahua_redis_command_timeouts_total", "counter", "Redis commands without an answer within store.redis.command_timeout.");
  text += "tahua_redis_command_timeouts_total " + std::to_string(r.timeouts.load()) + "\n";
  family("tahua_redis_command_errors_total", "counter", "Redis commands refused (store down), lost with their connection, or answered with an error.");
  text += "tahua_redis_command_errors_total " + std::to_string(r.errors.load()) + "\n";
  family("tahua_redis_command_duration_seconds", "histogram", "Time from sending a Redis command to its answer.");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < RedisCommandStats::kBounds.size(); ++i) {
    cumulative += r.buckets[i].load();
    char le[32];
    std::snprintf(le, sizeof le, "%.9g", RedisCommandStats::kBounds[i]);
    text += std::string("tahua_redis_command_duration_seconds_bucket{le=\"") + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += r.buckets.back().load();
  text += "tahua_redis_command_duration_seconds_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  char sum[32];
  std::snprintf(sum, sizeof sum, "%.9g", static_cast<double>(r.sum_ns.load()) / 1e9);
  text += std::string("tahua_redis_command_duration_seconds_sum ") + sum + "\n";
  text += "tahua_redis_command_duration_seconds_count " + std::to_string(cumulative) + "\n";
}

}  // namespace

asio::awaitable<std::string> Gateway::renderMetrics() {
  WorkerMetrics merged;
  for (auto& worker : workers_) {
    Worker* w = worker.get();
    WorkerMetrics copy = co_await asio::co_spawn(w->io(), workerMetrics(w), asio::use_awaitable);
    merged.merge(copy);
  }
  std::string text = renderPrometheus(merged);
  text += "# HELP tahua_config_reloads_total Config reloads (SIGHUP), by result.\n";
  text += "# TYPE tahua_config_reloads_total counter\n";
  text += "tahua_config_reloads_total{result=\"ok\"} " + std::to_string(reloads_ok_.load()) + "\n";
  text += "tahua_config_reloads_total{result=\"error\"} " + std::to_string(reloads_failed_.load()) + "\n";
  text += "# HELP tahua_config_generation Number of the config in use (1 at start, +1 per reload).\n";
  text += "# TYPE tahua_config_generation gauge\n";
  text += "tahua_config_generation " + std::to_string(generation_.load()) + "\n";
  {
    std::lock_guard lock(mutex_);
    text += healing_.metricsText();
  }
  // One unlabelled series with its HELP and TYPE lines.
  auto single = [&text](const char* name, const char* type, const char* help, const std::string& value) {
    text.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ").append(type);
    text.append("\n").append(name).append(" ").append(value).append("\n");
  };
  bool cached = false;
  {
    std::lock_guard lock(mutex_);
    cached = snapshot_->config->anyModelCached();
  }
  if (response_cache_ && cached) {
    const ResponseCache::Stats cs = response_cache_->stats();
    single("tahua_cache_entries", "gauge", "Answers in this replica's in-process response cache.", std::to_string(cs.entries));
    single("tahua_cache_bytes", "gauge", "Bytes of this replica's in-process response cache (bounded by cache.max_bytes).",
           std::to_string(cs.bytes));
    single("tahua_cache_evictions_total", "counter", "Answers the in-process response cache let go to stay within its bound.",
           std::to_string(cs.evictions));
    const SemanticIndex::Stats ss = response_cache_->semantic().stats();
    single("tahua_cache_semantic_entries", "gauge", "Vectors in this replica's semantic cache (every tenant and model).",
           std::to_string(ss.entries));
    single("tahua_cache_semantic_dropped_total", "counter",
           "Vectors not added to the semantic cache because its insert queue was full.", std::to_string(ss.dropped));
  }
  if (const StateStore::Stats st = store_->stats(); st.shared) {
    single("tahua_store_up", "gauge", "Whether the shared state store (Redis) answers (1) or limits are per replica (0).", st.up ? "1" : "0");
    single("tahua_store_local_decisions_total", "counter",
           "Limit decisions made by this replica alone while the shared store did not answer.", std::to_string(st.local_decisions));
    single("tahua_store_replicas", "gauge", "Replicas seen alive through the store's heartbeats (local limits divide by it).",
           std::to_string(st.replicas));
    single("tahua_store_adjustments_pending", "gauge", "Usage calibrations kept until the shared store answers again.",
           std::to_string(st.adjustments_pending));
    single("tahua_store_adjustments_dropped_total", "counter", "Calibrations dropped over the bound of 100,000 kept.",
           std::to_string(st.adjustments_dropped));
    single("tahua_store_lease_admissions_total", "counter",
           "Requests admitted from capacity this replica leased from the shared store (no round trip).", std::to_string(st.lease_admissions));
    single("tahua_store_lease_renewals_total", "counter",
           "Leases renewed from the shared store ahead of their end, off the request path.", std::to_string(st.lease_renewals));
    single("tahua_store_lease_waits_total", "counter",
           "Requests that waited for a lease grant another request had asked for, instead of asking the shared store themselves.",
           std::to_string(st.lease_waits));
    single("tahua_store_admissions_undone_total", "counter",
           "Admissions (and lease grants) whose answer was lost on the way back from the shared store, undone there.",
           std::to_string(st.admissions_undone));
    text += "# HELP tahua_store_lookups_total On-demand lookups of values (plugins' tahua.kv.get), by who answered: "
            "filter (the Bloom filter: never written), cached_miss (a miss remembered), store (asked).\n";
    text += "# TYPE tahua_store_lookups_total counter\n";
    text += "tahua_store_lookups_total{answer=\"filter\"} " + std::to_string(st.lookups_filtered) + "\n";
    text += "tahua_store_lookups_total{answer=\"cached_miss\"} " + std::to_string(st.lookups_cached) + "\n";
    text += "tahua_store_lookups_total{answer=\"store\"} " + std::to_string(st.lookups_asked) + "\n";
    if (st.id_filter) {
      single("tahua_store_id_filter_ready", "gauge",
             "Whether the lookup filter is trusted (built from the store's ids with the change subscription up).",
             st.id_filter_ready ? "1" : "0");
      single("tahua_store_id_filter_ids", "gauge", "Ids added to the lookup filter since it was last built.",
             std::to_string(st.id_filter_ids));
    }
  }
  if (discovery_) {
    const DnsDiscovery::Stats ds = discovery_->stats();
    const EndpointTablePtr table = discovery_->endpoints();
    single("tahua_discovery_resolutions_total", "counter", "DNS resolutions of deployments' names (discovery).", std::to_string(ds.resolutions));
    single("tahua_discovery_failures_total", "counter", "DNS resolutions that failed (the last endpoints were kept).",
           std::to_string(ds.failures));
    text += "# HELP tahua_discovery_endpoints Endpoints a deployment's DNS name has now.\n";
    text += "# TYPE tahua_discovery_endpoints gauge\n";
    for (const auto& [key, list] : *table) {
      const auto slash = key.find('/');
      text += "tahua_discovery_endpoints{model=\"" + escapeLabel(key.substr(0, slash)) + "\",deployment=\"" +
              escapeLabel(key.substr(slash + 1)) + "\"} " + std::to_string(list.size()) + "\n";
    }
  }
  if (region_) {
    single("tahua_region_link_leader", "gauge", "Whether this replica pushes for its region (one does, by a lock in its Redis).",
           region_->leader() ? "1" : "0");
    const auto family = [&](const char* name, const char* type, const char* help, auto value) {
      text.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ").append(type).append("\n");
      for (const auto& p : region_->peers())
        text.append(name).append("{peer=\"").append(escapeLabel(p->name)).append("\"} ").append(value(*p)).append("\n");
    };
    using Peer = RegionLink::PeerStats;
    family("tahua_region_peer_up", "gauge", "Whether the last cycle reached the peer region and pushed everything (leader only).",
           [](const Peer& p) { return std::string(p.up.load() ? "1" : "0"); });
    family("tahua_region_last_sync_timestamp_seconds", "gauge", "When the peer region last took everything newer here (unix seconds).",
           [](const Peer& p) { return std::to_string(p.last_sync_ms.load() / 1000); });
    family("tahua_region_records_pushed_total", "counter", "Tenants, keys and resources (and deletions) the peer region took from here.",
           [](const Peer& p) { return std::to_string(p.records_pushed.load()); });
    family("tahua_region_usage_pushed_total", "counter", "Quota use reports the peer region took from here.",
           [](const Peer& p) { return std::to_string(p.usage_pushed.load()); });
    family("tahua_region_link_errors_total", "counter", "Link cycles that could not reach the peer region (each retried).",
           [](const Peer& p) { return std::to_string(p.errors.load()); });
  }
  if (kube_ && kube_->watching()) {
    const KubeWatchStats& ks = kube_->stats();
    single("tahua_kubernetes_resources_listed", "gauge", "Whether every Kubernetes resource kind was listed once (readiness waits for it).",
           ks.listed.load() ? "1" : "0");
    single("tahua_kubernetes_resources", "gauge", "Resources the Kubernetes API holds for tahua now (every kind).",
           std::to_string(ks.resources.load()));
    single("tahua_kubernetes_lists_total", "counter", "Lists of a resource kind (the first ones, and again after 410 Gone or a failed watch).",
           std::to_string(ks.lists.load()));
    single("tahua_kubernetes_watch_events_total", "counter", "Watch events applied (added, modified, deleted).",
           std::to_string(ks.events.load()));
    single("tahua_kubernetes_errors_total", "counter", "Failed calls to the Kubernetes API (each retried with a backoff).",
           std::to_string(ks.errors.load()));
  }
  // Every deployment of the config in force (discovered and registered endpoints
  // included): where it came from, and what keeps it from traffic, if anything.
  SnapshotPtr served;
  {
    std::lock_guard lock(mutex_);
    served = snapshot_;
  }
  auto states_op = collectDeploymentStates(*served->config);
  const auto per_worker = co_await std::move(states_op);
  std::set<std::pair<std::string, std::string>> healed;  // ejected by a self-healing rule
  {
    std::lock_guard lock(mutex_);
    healed = healing_.ejected();
  }
  const auto now = SteadyClock::now();
  text += "# HELP tahua_deployment_state Each deployment (endpoints too), by source (config, dns, registration) and state "
          "(active, throttled, ejected, breaker_open): 1.\n";
  text += "# TYPE tahua_deployment_state gauge\n";
  for (const auto& m : served->config->models)
    for (const auto& d : m.deployments) {
      const char* state = summarizeDeployment(per_worker, d.index, now).state(healed.count({m.name, d.id}) > 0);
      text += "tahua_deployment_state{model=\"" + escapeLabel(m.name) + "\",deployment=\"" + escapeLabel(d.id) + "\",source=\"" +
              d.source + "\",state=\"" + state + "\"} 1\n";
    }
  auto draining_op = collectDraining(*served->config);
  const std::vector<std::string> draining = co_await std::move(draining_op);
  for (const std::string& key : draining) {
    const auto slash = key.find('/');
    const std::string id = key.substr(slash + 1);
    text += "tahua_deployment_state{model=\"" + escapeLabel(key.substr(0, slash)) + "\",deployment=\"" + escapeLabel(id) +
            "\",source=\"" + DeploymentStates::drainingSource(id) + "\",state=\"draining\"} 1\n";
  }
  text += "# HELP tahua_bulkhead_in_use Slots of a concurrency cap in use, by scope and kind (requests, streams).\n";
  text += "# TYPE tahua_bulkhead_in_use gauge\n";
  std::string waiting;
  bulkheads_.forEach([&](const std::string& scope, const Bulkheads::Pair& pair) {
    for (auto [kind, cap] : {std::pair<const char*, const ConcurrencyLimit*>{"requests", &pair.requests}, {"streams", &pair.streams}}) {
      if (cap->limit() == 0 && cap->inUse() == 0) continue;
      const std::string labels = "{scope=\"" + escapeLabel(scope) + "\",kind=\"" + kind + "\"} ";
      text += "tahua_bulkhead_in_use" + labels + std::to_string(cap->inUse()) + "\n";
      waiting += "tahua_bulkhead_waiting" + labels + std::to_string(cap->waiting()) + "\n";
    }
  });
  text += "# HELP tahua_bulkhead_waiting Requests queued for a slot of a concurrency cap (limits.queue_timeout).\n";
  text += "# TYPE tahua_bulkhead_waiting gauge\n";
  text += waiting;
  text += "# HELP tahua_config_info The config in force: its generation and where it came from (1).\n";
  text += "# TYPE tahua_config_info gauge\n";
  text += "tahua_config_info{generation=\"" + std::to_string(served->config->generation) + "\",source=\"" +
          escapeLabel(served->config->source) + "\"} 1\n";
  text += "# HELP tahua_build_info The running build (1).\n# TYPE tahua_build_info gauge\n";
  text += "tahua_build_info{version=\"" TAHUA_VERSION "\"} 1\n";
  redisMetrics(text);
  exporterMetrics(text, traces_.get(), usage_.get(), access_log_.get());
  processMetrics(text, started_);
  co_return text;
}

}  // namespace tahua
