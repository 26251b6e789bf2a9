// HTTP(S) client side: a per-worker pool of keep-alive connections per upstream
// origin, and the exchange that sends one request over a pooled (or new) connection.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.h"

namespace boost::asio {
class io_context;
}

namespace tahua {

struct WorkerMetrics;
class UpstreamPool;

// What an upstream exchange needs from the worker it runs on: its event loop, its
// connection pool and its counters. Narrow on purpose: the transport and the attempt
// loop do not depend on the worker (and tests build one of these without a worker).
struct UpstreamEnv {
  boost::asio::io_context& io;
  UpstreamPool& pool;
  WorkerMetrics& metrics;
};

struct UpstreamConnection;  // defined in upstream_client.cpp (keeps Beast out of here)

class UpstreamPool {
 public:
  UpstreamPool();
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // A live idle connection to `key` no older than `max_age`, or null.
  std::unique_ptr<UpstreamConnection> take(const std::string& key, Millis max_age);
  // Keeps `conn` for reuse unless `max_idle` connections to its origin are kept already.
  void put(std::unique_ptr<UpstreamConnection> conn, std::size_t max_idle);
  void clear();

 private:
  std::unordered_map<std::string, std::vector<std::unique_ptr<UpstreamConnection>>> idle_;
};

}  // namespace tahua
