#include "filters/bulkhead/concurrency_limit.h"

#include <algorithm>

#include "config/config.h"
#include "tenants/tenant_directory.h"

namespace tahua {

// A compare-and-swap loop rather than add-then-undo, so a refused request never makes the
// count look higher to another one that would have fitted.
bool ConcurrencyLimit::tryAcquire() {
  const std::size_t limit = limit_.load(std::memory_order_relaxed);
  std::size_t current = in_use_.load();
  do {
    if (limit != 0 && current >= limit) return false;
  } while (!in_use_.compare_exchange_weak(current, current + 1));
  return true;
}

// Ordering: release() lowers in_use_ then reads waiting_; enqueue() raises waiting_ then
// tries in_use_ (both sequentially consistent). So either the waiter sees the freed slot
// itself, or release() sees the waiter and grants it: no wake-up is lost.
void ConcurrencyLimit::release() {
  in_use_.fetch_sub(1);
  if (waiting_.load() == 0) return;
  std::function<void()> wake;
  {
    std::lock_guard lock(mutex_);
    if (queue_.empty() || !tryAcquire()) return;
    std::shared_ptr<QueueTicket> ticket = std::move(queue_.front());
    queue_.pop_front();
    waiting_.fetch_sub(1);
    ticket->granted = true;
    wake = ticket->wake;
  }
  wake();
}

ConcurrencyLimit::Enqueued ConcurrencyLimit::enqueue(const std::shared_ptr<QueueTicket>& ticket, std::size_t max_queue) {
  std::lock_guard lock(mutex_);
  if (queue_.size() >= max_queue) return Enqueued::Full;
  waiting_.fetch_add(1);
  if (tryAcquire()) {
    waiting_.fetch_sub(1);
    return Enqueued::Acquired;
  }
  queue_.push_back(ticket);
  return Enqueued::Queued;
}

bool ConcurrencyLimit::withdraw(const std::shared_ptr<QueueTicket>& ticket) {
  std::lock_guard lock(mutex_);
  if (ticket->granted) return false;
  auto it = std::find(queue_.begin(), queue_.end(), ticket);
  if (it != queue_.end()) {
    queue_.erase(it);
    waiting_.fetch_sub(1);
  }
  return true;
}

void Bulkheads::configure(const Config& config) {
  global_.requests.setLimit(config.limits.max_concurrent_requests);
  global_.streams.setLimit(config.limits.max_concurrent_streams);
  std::lock_guard lock(mutex_);
  for (auto& [name, pair] : routes_) {
    pair->requests.setLimit(0);
    pair->streams.setLimit(0);
  }
  for (const RouteConfig& r : config.routes) {
    if (r.max_concurrent_requests == 0 && r.max_concurrent_streams == 0) continue;
    auto& pair = routes_[r.name];
    if (!pair) pair = std::make_unique<Pair>();
    pair->requests.setLimit(r.max_concurrent_requests);
    pair->streams.setLimit(r.max_concurrent_streams);
  }
}

void Bulkheads::configureTenants(const TenantDirectory& directory) {
  std::lock_guard lock(mutex_);
  for (auto& [name, pair] : scoped_) {
    pair->requests.setLimit(0);
    pair->streams.setLimit(0);
  }
  auto set = [&](const std::string& scope, const LimitSet& l) {
    if (!l.anyCap()) return;
    auto& pair = scoped_[scope];
    if (!pair) pair = std::make_unique<Pair>();
    pair->requests.setLimit(static_cast<std::size_t>(l.max_concurrent_requests));
    pair->streams.setLimit(static_cast<std::size_t>(l.max_concurrent_streams));
  };
  for (const auto& t : directory.tenants) set("tenant:" + t.name, t.limits);
  for (const auto& k : directory.keys) set("key:" + k.name, k.limits);
}

Bulkheads::Pair* Bulkheads::scoped(std::string_view scope) {
  std::lock_guard lock(mutex_);
  auto it = scoped_.find(scope);
  return it == scoped_.end() ? nullptr : it->second.get();
}

Bulkheads::Pair* Bulkheads::route(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = routes_.find(name);
  return it == routes_.end() ? nullptr : it->second.get();
}

void Bulkheads::forEach(const std::function<void(const std::string&, const Pair&)>& fn) {
  fn("global", global_);
  std::lock_guard lock(mutex_);
  for (const auto& [name, pair] : routes_) fn("route:" + name, *pair);
  for (const auto& [scope, pair] : scoped_) fn(scope, *pair);
}

}  // namespace tahua
