// HTTP(S) client side: a per-worker pool of keep-alive connections per upstream
// origin, and the exchange that sends one request over a pooled (or new) connection.
#pragma once

#include <chrono>
#include <memory>
#include <span>
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
  // Keeps `conn` for reuse (taking it) unless `max_idle` connections to its origin are
  // kept already; then it is left with the caller and false returned.
  bool put(std::unique_ptr<UpstreamConnection>& conn, std::size_t max_idle);
  void clear();

  // The worker's one buffer for reading response bodies from plain-TCP upstreams. A
  // read fills it, the relay passes what it holds on before its next co_await, and only
  // a cut element (a few bytes) is kept per connection: a held stream owns no read
  // buffer, and a read takes everything the socket has (many events in one system call).
  std::span<char> readBuffer() { return {read_buffer_.get(), kReadBufferBytes}; }
  static constexpr std::size_t kReadBufferBytes = 64 * 1024;

 private:
  std::unordered_map<std::string, std::vector<std::unique_ptr<UpstreamConnection>>> idle_;
  std::unique_ptr<char[]> read_buffer_;
};

}  // namespace tahua
