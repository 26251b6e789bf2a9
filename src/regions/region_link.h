// The link between regions (config `region`, docs/regions.md): one replica of the region
// (the holder of a lock in its Redis) pushes, every `interval`, to each peer region's
// Redis what is newer here — tenants, keys and resources, last writer wins by a hybrid
// logical clock, deletions included — and this region's use of every quota counter, which
// the peer adds to its own counter. Its own thread with blocking connections bounded by
// `timeout`: a slow or unreachable peer delays the link, never a request, which reads and
// writes its own region's Redis only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"

namespace tahua {

class RegionLink {
 public:
  struct PeerStats {
    std::string name;
    std::atomic<bool> up{false};                  // the last cycle reached it and pushed everything
    std::atomic<std::int64_t> last_sync_ms{0};    // unix ms of the last such cycle
    std::atomic<std::uint64_t> records_pushed{0};  // records (and deletions) it took from here
    std::atomic<std::uint64_t> usage_pushed{0};    // quota reports it took
    std::atomic<std::uint64_t> errors{0};          // cycles that failed (each retried the next)
  };

  RegionLink(RegionConfig region, RedisStoreConfig store);
  ~RegionLink();

  void start();
  void stop();

  bool leader() const { return leader_.load(); }
  const std::vector<std::unique_ptr<PeerStats>>& peers() const { return stats_; }

 private:
  struct Impl;
  void run();

  RegionConfig region_;
  RedisStoreConfig store_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::unique_ptr<PeerStats>> stats_;
  std::atomic<bool> leader_{false};
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // under mu_
  std::thread thread_;
};

}  // namespace tahua
