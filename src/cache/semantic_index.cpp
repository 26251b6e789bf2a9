#include "cache/semantic_index.h"
#include "core/thread_name.h"

#include <hnswlib/hnswlib.h>

#include <cmath>

namespace tahua {

struct SemanticIndex::Index {
  std::mutex mu;
  std::size_t dim = 0;
  std::unique_ptr<hnswlib::InnerProductSpace> space;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> hnsw;
  struct Entry {
    std::string context;
    std::string key;
    std::int64_t expires_ms = 0;
  };
  std::vector<Entry> entries;  // by label
  std::size_t next = 0;        // the label the next entry takes once the ring is full
  std::size_t allocated = 0;   // the HNSW's max_elements (grows by doubling)
};

namespace {
constexpr std::size_t kFirstAllocation = 256;
constexpr std::size_t kNeighbours = 8;
constexpr std::size_t kSearchBreadth = 32;  // hnswlib's ef: recall over speed (its default is 10)
// Links per node and the breadth of an insert's search: an insert runs on the worker that
// kept the answer, so it is kept short (hnswlib's default breadth, 200, costs ~3x more).
constexpr std::size_t kLinks = 16;
constexpr std::size_t kInsertBreadth = 64;
}  // namespace

SemanticIndex::SemanticIndex(std::size_t max_entries, std::size_t max_per_index, Clock clock)
    : max_entries_(max_entries), max_per_index_(std::max<std::size_t>(max_per_index, 1)), clock_(std::move(clock)) {}

SemanticIndex::~SemanticIndex() {
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (inserter_.joinable()) inserter_.join();
}

void SemanticIndex::addLater(std::string index, std::vector<float> vector, std::string context, std::string key,
                             std::int64_t expires_ms) {
  {
    std::lock_guard lock(queue_mu_);
    if (queue_.size() >= kMaxQueued) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(Pending{std::move(index), std::move(context), std::move(key), std::move(vector), expires_ms});
    if (!inserter_.joinable()) inserter_ = std::thread([this] {
      nameThisThread("tahua-semantic");
      insertLoop();
    });
  }
  queue_cv_.notify_one();
}

void SemanticIndex::insertLoop() {
  std::unique_lock lock(queue_mu_);
  for (;;) {
    queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    add(p.index, std::move(p.vector), std::move(p.context), std::move(p.key), p.expires_ms);
    lock.lock();
  }
}

bool SemanticIndex::normalize(std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += static_cast<double>(x) * x;
  if (!(sum > 0) || !std::isfinite(sum)) return false;
  const float inv = static_cast<float>(1.0 / std::sqrt(sum));
  for (float& x : v) x *= inv;
  return true;
}

std::shared_ptr<SemanticIndex::Index> SemanticIndex::indexOf(const std::string& name, std::size_t dim, bool create) {
  std::lock_guard lock(mu_);
  auto it = indexes_.find(name);
  if (it != indexes_.end()) return it->second;
  if (!create) return nullptr;
  auto index = std::make_shared<Index>();
  index->dim = dim;
  index->space = std::make_unique<hnswlib::InnerProductSpace>(dim);
  index->allocated = std::min(kFirstAllocation, max_per_index_);
  index->hnsw = std::make_unique<hnswlib::HierarchicalNSW<float>>(index->space.get(), index->allocated, kLinks, kInsertBreadth);
  index->hnsw->setEf(kSearchBreadth);
  indexes_.emplace(name, index);
  return index;
}

std::optional<SemanticIndex::Match> SemanticIndex::find(const std::string& name, std::vector<float> vector,
                                                        std::string_view context, float threshold) {
  if (!normalize(vector)) return std::nullopt;
  auto index = indexOf(name, vector.size(), false);
  if (!index) return std::nullopt;
  std::lock_guard lock(index->mu);
  if (index->dim != vector.size() || index->entries.empty()) return std::nullopt;
  std::optional<Match> best;
  try {
    auto found = index->hnsw->searchKnn(vector.data(), std::min(kNeighbours, index->entries.size()));
    const std::int64_t now = clock_();
    while (!found.empty()) {
      const auto [distance, label] = found.top();
      found.pop();
      if (label >= index->entries.size()) continue;
      const Index::Entry& e = index->entries[label];
      const float similarity = 1.0f - distance;
      if (e.context != context || e.expires_ms <= now || similarity < threshold) continue;
      if (!best || similarity > best->similarity) best = Match{e.key, similarity};
    }
  } catch (const std::exception&) {
    return std::nullopt;  // the index refused the search: a miss
  }
  return best;
}

bool SemanticIndex::add(const std::string& name, std::vector<float> vector, std::string context, std::string key,
                        std::int64_t expires_ms) {
  if (!normalize(vector)) return false;
  auto index = indexOf(name, vector.size(), true);
  std::lock_guard lock(index->mu);
  if (index->dim != vector.size()) return false;
  try {
    std::size_t label;
    const bool room = index->entries.size() < max_per_index_ && total_.load(std::memory_order_relaxed) < max_entries_;
    if (room) {
      if (index->entries.size() == index->allocated) {
        index->allocated = std::min(index->allocated * 2, max_per_index_);
        index->hnsw->resizeIndex(index->allocated);
      }
      label = index->entries.size();
      index->entries.emplace_back();
      total_.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (index->entries.empty()) return false;  // the total is reached and this index has nothing of its own
      label = index->next % index->entries.size();  // its own oldest
      index->next = label + 1;
    }
    index->hnsw->addPoint(vector.data(), label);  // an existing label's vector is replaced
    index->entries[label] = Index::Entry{std::move(context), std::move(key), expires_ms};
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

std::size_t SemanticIndex::purge(std::string_view tenant_part, std::string_view key_part, std::string_view model_part) {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (auto it = indexes_.begin(); it != indexes_.end();) {
    const std::string_view name = it->first;
    auto has = [&](std::string_view part) { return part.empty() || name.find(part) != std::string_view::npos; };
    if (has(tenant_part) && has(key_part) && has(model_part)) {
      {
        std::lock_guard index_lock(it->second->mu);
        n += it->second->entries.size();
      }
      total_.fetch_sub(std::min(total_.load(), it->second->entries.size()));
      it = indexes_.erase(it);
    } else {
      ++it;
    }
  }
  return n;
}

SemanticIndex::Stats SemanticIndex::stats() const {
  Stats s;
  s.dropped = dropped_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  s.indexes = indexes_.size();
  for (const auto& [name, index] : indexes_) {
    std::lock_guard index_lock(index->mu);
    s.entries += index->entries.size();
    // The vectors and level-0 links of what is allocated (hnswlib's own layout).
    s.bytes += index->allocated * (index->dim * sizeof(float) + 16 * 2 * sizeof(std::uint32_t) + 16);
  }
  return s;
}

}  // namespace tahua
