// One worker = one thread = one io_context. A connection lives on one worker for its
// whole life; everything a request touches on the data path (filters, metrics, access
// log buffer, upstream pool) belongs to that worker, so nothing is locked.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <vector>
#include <cstdint>
#include <memory>
#include <string>

#include "batches/batch_poller.h"
#include "filters/balancer/balancer_filter.h"
#include "filters/bulkhead/bulkhead_filter.h"
#include "filters/circuit_breaker/circuit_breaker_filter.h"
#include "filters/filter.h"
#include "filters/usage/pending_records.h"
#include "filters/worker_services.h"
#include "net/http_client.h"
#include "providers/snapshot.h"
#include "server/session_host.h"
#include "server/upstream_client.h"
#include "tenants/tenant_directory.h"
#include "telemetry/access_log_sink.h"
#include "telemetry/export_queue.h"
#include "telemetry/metrics.h"

namespace tahua {

class Gateway;

class Worker final : public WorkerServices, public SessionHost, private BatchPollerHost {
 public:
  // `spans` and `records`: the trace and usage exporters' queues (null when off).
  Worker(unsigned id, unsigned worker_count, Gateway& gateway, SnapshotPtr snapshot, TenantDirectoryPtr tenants,
         std::shared_ptr<LogFile> access_log, ExportQueue* spans, ExportQueue* records);
  ~Worker() override;

  // WorkerServices, for filters.
  void post(std::function<void()> fn) override;
  std::unique_ptr<TimerHandle> runAfter(Millis delay, std::function<void()> fn) override;
  void fetch(OutboundRequest request, std::function<void(OutboundResponse)> done) override;
  using WorkerServices::callModel;
  void callModel(ModelCall call, std::function<void(OutboundResponse)> done) override;

  unsigned id() const override { return id_; }
  boost::asio::io_context& io() override { return io_; }
  Gateway& gateway() { return gateway_; }
  // The current snapshot and the filter chain built from it. A request copies both
  // pointers when it starts and uses its copies to the end, so a reload never changes
  // the config or the chain under a request in flight.
  const SnapshotPtr& snapshot() const override { return snapshot_; }
  const std::shared_ptr<FilterChain>& chain() const override { return chain_; }
  // Called on the worker's thread when a new config is published (hot reload), with the
  // tenants and keys that go with it.
  void setSnapshot(SnapshotPtr snapshot, TenantDirectoryPtr tenants);
  // Called on the worker's thread when tenants or keys changed (admin API, store).
  void setTenants(TenantDirectoryPtr tenants);
  WorkerMetrics& metrics() override { return metrics_; }
  // GPU node status reports, published by the gateway (on this worker's thread).
  void setNodes(NodeTablePtr nodes) { nodes_ = std::move(nodes); }
  const DeploymentStates& deployments() const { return deployments_; }
  const NodeTablePtr& nodes() const { return nodes_; }
  UpstreamPool& pool() { return *pool_; }
  UpstreamEnv& upstreamEnv() override { return upstream_env_; }
  AccessLogSink& accessLog() { return access_log_; }

  bool draining() const override { return draining_; }
  bool drainDeadlinePassed() const override { return drain_deadline_passed_; }

  void nextRequestId(std::string& into) override;

  void registerSession(SessionBase* s, bool admin) override;
  void unregisterSession(SessionBase* s, bool admin) override;
  void watchSoon(SessionBase* s) override;
  void watchSoonCancel(SessionBase* s) override;
  // Sessions of the public listeners, or of the admin listener: each has its own cap.
  int liveSessions(bool admin) const { return (admin ? admin_sessions_ : live_sessions_).load(std::memory_order_relaxed); }
  int liveSessions() const { return liveSessions(false) + liveSessions(true); }

  // SessionHost: the gateway's own answers (worker.cpp).
  Readiness readiness(const Config& config) const override;
  bool gatewayDraining() const override;
  boost::asio::awaitable<std::string> renderMetrics() override;
  boost::asio::awaitable<AdminReply> admin(std::string_view method, std::string_view path,
                                           std::string_view authorization, std::string_view accept,
                                           std::string& body) override;

  // Thread body. Returns when stop() is called.
  void run();
  // These three are posted to the worker's own thread by the gateway.
  void beginDrain();
  void drainDeadline();
  void stop();

  // Called from the worker thread only.
  void addAcceptorTask(std::function<void()> close_acceptor) { acceptor_closers_.push_back(std::move(close_acceptor)); }

 private:
  void scheduleLogFlush();
  void scheduleHeartbeatSweep();
  void watchTick();
  std::shared_ptr<FilterChain> buildChain();

  unsigned id_;
  unsigned worker_count_;
  DeploymentStates deployments_;
  NodeTablePtr nodes_;
  Balancer balancer_;
  Gateway& gateway_;
  SnapshotPtr snapshot_;
  TenantDirectoryPtr tenants_;
  // The first worker meters ended batches (batches/batch_poller.h).
  std::unique_ptr<BatchPoller> batch_poller_;
  SnapshotPtr currentSnapshot() const override { return snapshot_; }
  void meterBatch(const BatchUsage& usage) override;
  // One thread does all I/O on this context: no locking in the reactor. (Other threads
  // only post to it, which stays locked.)
  boost::asio::io_context io_{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  // The filters' own calls (fetch(): plugins' tahua.http, moderation, the batch poller),
  // with their pool of kept-alive connections.
  HttpClient http_{io_};
  std::shared_ptr<FilterChain> chain_;
  WorkerMetrics metrics_;
  AccessLogSink access_log_;
  ExportBuffer spans_;    // span records for the trace exporter
  ExportBuffer records_;  // usage records for the usage exporter (packed: telemetry/usage_record.h)
  std::unique_ptr<PendingRecords> pending_records_;  // those waiting for a late verdict
  std::unique_ptr<UpstreamPool> pool_;
  UpstreamEnv upstream_env_;
  SessionBase* sessions_ = nullptr;
  SessionBase* watch_soon_ = nullptr;  // sessions whose client watch starts at the next tick
  std::unique_ptr<boost::asio::steady_timer> watch_timer_;
  bool watch_timer_armed_ = false;
  std::atomic<int> live_sessions_{0};
  std::atomic<int> admin_sessions_{0};
  bool draining_ = false;
  bool drain_deadline_passed_ = false;
  std::uint64_t request_counter_ = 0;
  std::string request_id_prefix_;
  std::vector<std::function<void()>> acceptor_closers_;
  std::unique_ptr<boost::asio::steady_timer> flush_timer_;
  std::unique_ptr<boost::asio::steady_timer> heartbeat_timer_;
};

}  // namespace tahua
