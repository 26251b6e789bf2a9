// Every Redis command the store sends, counted process-wide for /metrics: how many, how
// long they took, how many timed out or failed. Relaxed atomics: a worker's connection
// adds to them without a lock (with leases, commands are a small share of requests).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace tahua {

struct RedisCommandStats {
  static constexpr std::array<double, 12> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                     0.01,   0.025,   0.05,   0.1,   0.25,   1};
  std::atomic<std::uint64_t> commands{0};
  std::atomic<std::uint64_t> timeouts{0};  // no answer within store.redis.command_timeout
  std::atomic<std::uint64_t> errors{0};    // refused while down, connection lost, an error reply
  std::array<std::atomic<std::uint64_t>, kBounds.size() + 1> buckets{};  // not cumulative; last = +Inf
  std::atomic<std::uint64_t> sum_ns{0};

  void observe(std::chrono::steady_clock::duration d) {
    const double s = std::chrono::duration<double>(d).count();
    std::size_t i = 0;
    while (i < kBounds.size() && s > kBounds[i]) ++i;
    buckets[i].fetch_add(1, std::memory_order_relaxed);
    sum_ns.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()),
                     std::memory_order_relaxed);
  }

  static RedisCommandStats& global() {
    static RedisCommandStats stats;
    return stats;
  }
};

}  // namespace tahua
