// The semantic cache's vectors: one HNSW index (hnswlib) per tenant (or key) and model,
// in process, cosine similarity (vectors normalized, inner product). An entry points to
// an answer of the exact layer by its key, so answers are kept (and bounded) once; the
// index holds the vector, the hash of everything but the last user message (which must
// match exactly) and the entry's expiry.
//
// Bounds: at most max_per_index entries an index and max_entries in all. An index at its
// bound, or any index once the total is reached, replaces its own oldest entry: one
// tenant's entries never evict another's. Vectors count: 1536 floats are 6 KB.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace tahua {

class SemanticIndex {
 public:
  using Clock = std::function<std::int64_t()>;  // unix ms
  SemanticIndex(std::size_t max_entries, std::size_t max_per_index, Clock clock);
  ~SemanticIndex();

  struct Match {
    std::string key;  // the exact layer's key of the answer
    float similarity = 0;
  };
  // The most similar live entry of `index` with the same context, if at least `threshold`.
  std::optional<Match> find(const std::string& index, std::vector<float> vector, std::string_view context, float threshold);
  // False if it could not be kept (another dimension than the index's, no room).
  bool add(const std::string& index, std::vector<float> vector, std::string context, std::string key, std::int64_t expires_ms);
  // The same, later, on the index's own thread (an insert searches the graph: ~0.5 ms at
  // 384 dimensions, too long for a worker's loop). At most kMaxQueued wait; more are
  // dropped (counted in stats().dropped).
  void addLater(std::string index, std::vector<float> vector, std::string context, std::string key, std::int64_t expires_ms);
  static constexpr std::size_t kMaxQueued = 1024;
  // Drops every index whose name contains each non-empty part (names are the exact
  // layer's key prefixes: "t<tenant>:k<key>:m<model>"). Returns the entries dropped.
  std::size_t purge(std::string_view tenant_part, std::string_view key_part, std::string_view model_part);

  struct Stats {
    std::uint64_t entries = 0, indexes = 0, bytes = 0, dropped = 0;
  };
  Stats stats() const;

  // Unit length in place (cosine similarity as an inner product); false for a zero vector.
  static bool normalize(std::vector<float>& v);

 private:
  struct Index;
  std::size_t max_entries_, max_per_index_;
  Clock clock_;
  mutable std::mutex mu_;  // the map; each index has its own lock
  std::unordered_map<std::string, std::shared_ptr<Index>> indexes_;
  std::atomic<std::size_t> total_{0};
  std::shared_ptr<Index> indexOf(const std::string& name, std::size_t dim, bool create);

  // The inserter: a queue and its thread (started by the first addLater).
  struct Pending {
    std::string index, context, key;
    std::vector<float> vector;
    std::int64_t expires_ms = 0;
  };
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  std::thread inserter_;
  std::atomic<std::uint64_t> dropped_{0};
  void insertLoop();
};

}  // namespace tahua
