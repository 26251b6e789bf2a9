// The process: loads the snapshot, starts one worker per core with its own listeners
// (SO_REUSEPORT spreads connections), handles signals and the graceful drain.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>
#include <vector>

#include "providers/provider.h"

namespace tahua {

class Worker;

class Gateway {
 public:
  explicit Gateway(SnapshotPtr snapshot);
  ~Gateway();

  // Binds listeners, runs the workers until SIGTERM/SIGINT and the drain complete.
  // Returns the process exit code.
  int run();

  // Ready: config loaded, a provider usable, not draining.
  bool ready() const;
  bool draining() const { return draining_.load(std::memory_order_relaxed); }
  // Merges every worker's metrics (each copied on its own thread) into Prometheus text.
  boost::asio::awaitable<std::string> renderMetrics();

 private:
  SnapshotPtr snapshot_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> draining_{false};
};

}  // namespace tahua
