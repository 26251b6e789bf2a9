// The in-process state store: one replica's counters in memory, shared by its workers.
// Counters are spread over 64 shards, each behind its own mutex held for the few
// arithmetic steps of a decision; an admission locks the shards of its checks in
// index order (no deadlock) and so is atomic over all of them.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "config/config.h"
#include "store/state_store.h"

namespace tahua {

class MemoryStore final : public StateStore {
 public:
  // `clock` returns unix milliseconds (tests pass a fake one).
  explicit MemoryStore(std::function<std::int64_t()> clock = unixMillis) : clock_(std::move(clock)) {}

  void admit(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) override;
  void adjust(const LimitCheck& check, std::int64_t charged_ms, std::int64_t delta) override;

  // The decision `check` would get now, without charging it (admin views, tests).
  LimitDecision peek(const LimitCheck& check);
  std::size_t counters() const;

 private:
  static constexpr std::size_t kShards = 64;
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, LimitState, StringHash, std::equal_to<>> states;
  };
  static std::size_t shardOf(std::string_view key) { return StringHash{}(key) % kShards; }
  LimitState& stateOf(Shard& shard, std::string_view key);

  std::function<std::int64_t()> clock_;
  std::array<Shard, kShards> shards_;
};

}  // namespace tahua
