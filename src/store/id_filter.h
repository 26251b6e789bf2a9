// What a replica knows about the ids a shared store holds, so that a lookup of an id
// that does not exist is answered without a round trip (S0 §3.2: a Bloom filter and a
// short-lived cache of misses in front of on-demand lookups; "never wrongly refuse").
//
// - The Bloom filter is sized from the expected number of ids and the false-positive
//   rate: m = -n ln p / (ln 2)^2 bits, k = (m / n) ln 2 probes (double hashing). Its bits
//   are atomics (set with fetch_or, read relaxed): lookups from every worker and adds
//   from the store's subscriber take no lock.
// - It is trusted only while `ready`: after it was rebuilt from the store's full set of
//   ids with the change subscription connected throughout, so every id written since is
//   in it. Until then (start, a lost subscription, a rebuild, or more ids than it was
//   sized for) every lookup goes to the store.
// - The cache of misses holds ids the store said it does not have, for `negative_ttl`;
//   a change notification (or a write from this replica) removes the id at once.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/duration.h"

namespace tahua {

class IdFilter {
 public:
  IdFilter(std::uint64_t expected_ids, double false_positive_rate, Millis negative_ttl);

  enum class Verdict { Absent, Missed, Ask };  // Absent: the filter; Missed: the cache of misses
  Verdict check(std::string_view id);

  void add(std::string_view id);          // a write, from this replica or another
  // The store said it has no such id, in answer to a lookup sent when the id's stamp was
  // `stamp`: kept only if no write of an id of its shard was seen since (a write that
  // raced the lookup must not be hidden by it).
  std::uint64_t stamp(std::string_view id);
  void missed(std::string_view id, std::uint64_t stamp);
  // A rebuild: not trusted (and the misses forgotten) until rebuilt(); the ids are then
  // added again (the subscription's and the scan's).
  void startRebuild();
  void rebuilt();
  void distrust();  // the subscription was lost: every lookup asks until a rebuild

  bool ready() const { return ready_.load(std::memory_order_acquire); }
  std::size_t bits() const { return bits_; }
  unsigned probes() const { return probes_; }
  std::uint64_t ids() const { return added_.load(std::memory_order_relaxed); }
  std::uint64_t capacity() const { return capacity_; }

 private:
  bool mayContain(std::uint64_t h1, std::uint64_t h2) const;
  static void hash(std::string_view id, std::uint64_t& h1, std::uint64_t& h2);

  std::size_t bits_;
  unsigned probes_;
  std::uint64_t capacity_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> words_;
  std::atomic<bool> ready_{false};
  std::atomic<std::uint64_t> generation_{0};  // odd while bits are being cleared
  std::atomic<std::uint64_t> added_{0};

  Millis negative_ttl_;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::chrono::steady_clock::time_point> misses;
    std::uint64_t writes = 0;  // ids of this shard added: a stamp
  };
  static constexpr std::size_t kShards = 16;
  static constexpr std::size_t kMaxMissesPerShard = 65'536;  // 1 M misses in all, bounded
  std::array<Shard, kShards> shards_;
  Shard& shardOf(std::uint64_t h) { return shards_[h % kShards]; }
};

}  // namespace tahua
