#include "store/id_filter.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tahua {

namespace {
// splitmix64's finalizer: spreads std::hash's bits into a second, independent hash.
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

IdFilter::IdFilter(std::uint64_t expected_ids, double false_positive_rate, Millis negative_ttl) : negative_ttl_(negative_ttl) {
  const double n = static_cast<double>(std::max<std::uint64_t>(expected_ids, 1));
  const double p = std::clamp(false_positive_rate, 1e-9, 0.5);
  const double ln2 = std::log(2.0);
  const double m = std::ceil(-n * std::log(p) / (ln2 * ln2));
  bits_ = static_cast<std::size_t>(std::max(64.0, m));
  bits_ = (bits_ + 63) / 64 * 64;
  probes_ = static_cast<unsigned>(std::clamp(std::round(static_cast<double>(bits_) / n * ln2), 1.0, 30.0));
  capacity_ = expected_ids;
  words_ = std::make_unique<std::atomic<std::uint64_t>[]>(bits_ / 64);
  for (std::size_t i = 0; i < bits_ / 64; ++i) words_[i].store(0, std::memory_order_relaxed);
}

void IdFilter::hash(std::string_view id, std::uint64_t& h1, std::uint64_t& h2) {
  h1 = std::hash<std::string_view>{}(id);
  h2 = mix(h1) | 1;  // odd: the probes cover every residue
}

bool IdFilter::mayContain(std::uint64_t h1, std::uint64_t h2) const {
  for (unsigned i = 0; i < probes_; ++i) {
    const std::uint64_t bit = (h1 + i * h2) % bits_;
    if (!(words_[bit / 64].load(std::memory_order_relaxed) & (1ULL << (bit % 64)))) return false;
  }
  return true;
}

IdFilter::Verdict IdFilter::check(std::string_view id) {
  std::uint64_t h1 = 0, h2 = 0;
  hash(id, h1, h2);
  const std::uint64_t gen = generation_.load(std::memory_order_acquire);
  if (ready() && !(gen & 1) && !mayContain(h1, h2) && generation_.load(std::memory_order_acquire) == gen && ready())
    return Verdict::Absent;
  if (!ready()) return Verdict::Ask;  // a miss remembered while writes may go unheard is no answer
  Shard& s = shardOf(h2);
  std::lock_guard lock(s.mu);
  auto it = s.misses.find(std::string(id));
  if (it == s.misses.end()) return Verdict::Ask;
  if (std::chrono::steady_clock::now() < it->second) return Verdict::Missed;
  s.misses.erase(it);
  return Verdict::Ask;
}

void IdFilter::add(std::string_view id) {
  std::uint64_t h1 = 0, h2 = 0;
  hash(id, h1, h2);
  bool fresh = false;
  for (unsigned i = 0; i < probes_; ++i) {
    const std::uint64_t bit = (h1 + i * h2) % bits_, mask = 1ULL << (bit % 64);
    fresh |= !(words_[bit / 64].fetch_or(mask, std::memory_order_relaxed) & mask);
  }
  // Past what it was sized for the false-positive rate climbs: still correct, but a
  // rebuild (which drops expired ids) is due; the owner looks at ids(). An id heard
  // twice (this replica's write, then its own notification; the scan and a write during
  // it) sets no new bit and is counted once.
  if (fresh) added_.fetch_add(1, std::memory_order_relaxed);
  Shard& s = shardOf(h2);
  std::lock_guard lock(s.mu);
  ++s.writes;
  s.misses.erase(std::string(id));
}

std::uint64_t IdFilter::stamp(std::string_view id) {
  std::uint64_t h1 = 0, h2 = 0;
  hash(id, h1, h2);
  Shard& s = shardOf(h2);
  std::lock_guard lock(s.mu);
  return s.writes;
}

void IdFilter::missed(std::string_view id, std::uint64_t stamp) {
  if (negative_ttl_.count() <= 0) return;
  std::uint64_t h1 = 0, h2 = 0;
  hash(id, h1, h2);
  Shard& s = shardOf(h2);
  std::lock_guard lock(s.mu);
  if (s.writes != stamp) return;
  if (s.misses.size() >= kMaxMissesPerShard) {
    // Full: the expired go; if none has, the whole shard (a flood of distinct ids must
    // not grow memory; the filter still answers for them).
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(s.misses, [&](const auto& kv) { return kv.second <= now; });
    if (s.misses.size() >= kMaxMissesPerShard) s.misses.clear();
  }
  s.misses.insert_or_assign(std::string(id), std::chrono::steady_clock::now() + negative_ttl_);
}

void IdFilter::startRebuild() {
  ready_.store(false, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);  // odd: clearing
  for (std::size_t i = 0; i < bits_ / 64; ++i) words_[i].store(0, std::memory_order_relaxed);
  added_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  for (Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    s.misses.clear();
    ++s.writes;  // a lookup in flight across the rebuild keeps no miss
  }
}

void IdFilter::rebuilt() {
  if (added_.load(std::memory_order_relaxed) <= capacity_) ready_.store(true, std::memory_order_release);
}

void IdFilter::distrust() {
  ready_.store(false, std::memory_order_release);
  for (Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    s.misses.clear();
    ++s.writes;
  }
}

}  // namespace tahua
