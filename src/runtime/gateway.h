// The process: loads the snapshot, starts one worker per core with its own listeners
// (SO_REUSEPORT spreads connections), handles signals and the graceful drain.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "providers/provider.h"

namespace tahua {

class Worker;

// Where the config comes from, so it can be read again on SIGHUP.
struct ConfigSource {
  std::string path;                          // empty: the built-in default
  std::optional<ListenerConfig> listen;      // --listen override
  bool watch = true;                         // reload when the file changes (inotify)
};

// Loads and validates the config and builds its snapshot. Errors name file, line and
// field; warnings (e.g. unset key variables) are appended to `warnings`.
std::variant<SnapshotPtr, std::string> loadSnapshot(const ConfigSource& source, std::vector<std::string>& warnings);

class Gateway {
 public:
  Gateway(SnapshotPtr snapshot, ConfigSource source);
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
  // SIGHUP: read the config again; publish it to every worker if valid, else keep
  // serving the last good one. Runs on the main thread.
  void reload(std::string_view trigger);

  ConfigSource source_;
  SnapshotPtr snapshot_;  // the last good one (main thread; workers have their own copy)
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> draining_{false};
  std::atomic<std::uint64_t> reloads_ok_{0};
  std::atomic<std::uint64_t> reloads_failed_{0};
  std::atomic<std::uint64_t> generation_{1};
};

}  // namespace tahua
