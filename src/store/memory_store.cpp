#include "store/memory_store.h"

#include <algorithm>
#include <chrono>

namespace tahua {

std::int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

LimitState& MemoryStore::stateOf(Shard& shard, std::string_view key) {
  auto it = shard.states.find(key);
  if (it == shard.states.end()) it = shard.states.emplace(std::string(key), LimitState{}).first;
  return it->second;
}

void MemoryStore::admit(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) {
  Admission out;
  out.count = std::min(checks.size(), Admission::kMaxChecks);
  checks = checks.first(out.count);
  // The shards involved, each locked once, in index order.
  std::array<std::size_t, Admission::kMaxChecks> shard{};
  std::array<std::size_t, Admission::kMaxChecks> order{};
  std::size_t locked = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    shard[i] = shardOf(checks[i].key);
    order[locked++] = shard[i];
  }
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(locked));
  locked = static_cast<std::size_t>(std::unique(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(locked)) - order.begin());
  for (std::size_t i = 0; i < locked; ++i) shards_[order[i]].mu.lock();

  const std::int64_t now = out.at_ms = clock_();
  std::array<LimitState*, Admission::kMaxChecks> states{};
  for (std::size_t i = 0; i < checks.size(); ++i) {
    states[i] = &stateOf(shards_[shard[i]], checks[i].key);
    out.decisions[i] = applyLimit(checks[i].spec, *states[i], now, checks[i].cost, false);
    if (!out.decisions[i].allowed && out.allowed) {
      out.allowed = false;
      out.denied = i;
    }
  }
  if (out.allowed)
    for (std::size_t i = 0; i < checks.size(); ++i) applyLimit(checks[i].spec, *states[i], now, checks[i].cost, true);

  for (std::size_t i = locked; i-- > 0;) shards_[order[i]].mu.unlock();
  done(out);
}

void MemoryStore::adjust(const LimitCheck& check, std::int64_t charged_ms, std::int64_t delta) {
  if (delta == 0) return;
  Shard& s = shards_[shardOf(check.key)];
  std::lock_guard lock(s.mu);
  adjustLimit(check.spec, stateOf(s, check.key), clock_(), charged_ms, delta);
}

LimitDecision MemoryStore::peek(const LimitCheck& check) {
  Shard& s = shards_[shardOf(check.key)];
  std::lock_guard lock(s.mu);
  return applyLimit(check.spec, stateOf(s, check.key), clock_(), check.cost, false);
}

std::size_t MemoryStore::counters() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.states.size();
  }
  return n;
}

}  // namespace tahua
