// A process-wide cap on things in flight (requests or streams of one scope), shared by
// every worker so a cap of N means N, not N per worker. Taking and giving back a slot
// is one atomic operation; the mutex is only touched when a request has to queue for a
// slot (limits.queue_timeout) or a slot is freed while someone waits.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace tahua {

struct Config;
struct TenantDirectory;

// A request waiting for a slot. `wake` is called (from any thread, without locks held)
// once the slot was granted to it; it must hand over to the waiter's own thread.
struct QueueTicket {
  std::function<void()> wake;
  bool granted = false;  // guarded by the limit's mutex
};

class ConcurrencyLimit {
 public:
  enum class Enqueued { Acquired, Queued, Full };

  void setLimit(std::size_t limit) { limit_.store(limit, std::memory_order_relaxed); }
  std::size_t limit() const { return limit_.load(std::memory_order_relaxed); }
  std::size_t inUse() const { return in_use_.load(std::memory_order_relaxed); }
  std::size_t waiting() const { return waiting_.load(std::memory_order_relaxed); }

  // Takes a slot if one is free (limit 0: no cap, the slot is only counted).
  bool tryAcquire();
  // Gives a slot back; hands it to the oldest waiter, if any.
  void release();
  // No slot free: wait in line (at most `max_queue` waiters), unless one freed meanwhile.
  Enqueued enqueue(const std::shared_ptr<QueueTicket>& ticket, std::size_t max_queue);
  // The waiter gives up (timeout, client gone). False if the slot was granted first:
  // the caller then holds it and must release it.
  bool withdraw(const std::shared_ptr<QueueTicket>& ticket);

 private:
  std::atomic<std::size_t> limit_{0};
  std::atomic<std::size_t> in_use_{0};
  std::atomic<std::size_t> waiting_{0};
  std::mutex mutex_;
  std::deque<std::shared_ptr<QueueTicket>> queue_;
};

// Every cap of the process: the global ones and those of named routes. Owned by the
// gateway, so counts survive reloads; entries are never removed (a request in flight
// may still release into one), only their limits change.
class Bulkheads {
 public:
  struct Pair {
    ConcurrencyLimit requests;
    ConcurrencyLimit streams;
  };
  // Sets every cap from `config` (routes without caps get 0 = none). Not on the request path.
  void configure(const Config& config);
  Pair& global() { return global_; }
  // The caps of a route by name, or null if it never had any.
  Pair* route(std::string_view name);
  // Sets the caps of every tenant and key (limits.max_concurrent_*), from the config
  // file and the admin API; others get 0. Not on the request path.
  void configureTenants(const TenantDirectory& directory);
  // The caps of "tenant:<name>" / "key:<name>", or null if it never had any.
  Pair* scoped(std::string_view scope);
  // Calls `fn(scope, pair)` for every scope ("global", "route:<name>"), for metrics.
  void forEach(const std::function<void(const std::string&, const Pair&)>& fn);

 private:
  Pair global_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Pair>, std::less<>> routes_;
  std::map<std::string, std::unique_ptr<Pair>, std::less<>> scoped_;  // tenant:<name>, key:<name>
};

}  // namespace tahua
