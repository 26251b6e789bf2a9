// Workers hand telemetry (usage records, spans) to a background exporter in batches:
// each worker collects into its own ExportBuffer (no lock per request) and hands the
// buffer over every 200 ms or every kFlushItems items, one lock per batch. The buffer
// itself moves (no copy); the worker gets back the memory of one the exporter is done
// with. The queue is bounded in items: a batch that would pass the bound is refused and
// counted as dropped, never waited for: a slow or dead exporter cannot slow a request.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "telemetry/json_out.h"

namespace tahua {

struct ExportBatch {
  JsonBuf data;  // items, each ended by the buffer's separator
  std::size_t items = 0;
};

class ExportQueue {
 public:
  explicit ExportQueue(std::size_t max_items) : max_items_(max_items) {}

  // Takes the batch, or refuses it (counted in dropped()) when the queue is full or closed.
  // `spare`, when given, gets memory to fill again: a buffer the exporter gave back, or
  // the refused batch's own (emptied).
  bool push(ExportBatch&& batch, JsonBuf* spare = nullptr);
  // Every batch queued, waiting up to `wait` for the first; empty after close() once drained.
  std::vector<ExportBatch> take(std::chrono::milliseconds wait);
  // The exporter is done with these batches: their buffers are kept for the workers.
  void recycle(std::vector<ExportBatch>& done);
  // No more pushes are taken; take() no longer waits.
  void close();
  bool closed() const;

  std::size_t depth() const { return depth_.load(std::memory_order_relaxed); }      // items waiting
  std::uint64_t accepted() const { return accepted_.load(std::memory_order_relaxed); }  // items ever taken in
  std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }    // items refused

 private:
  // Buffers kept for reuse; past this many workers, some hand-overs allocate.
  static constexpr std::size_t kSpares = 8;

  const std::size_t max_items_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ExportBatch> batches_;
  std::vector<JsonBuf> spares_;
  bool closed_ = false;
  std::atomic<std::size_t> depth_{0};
  std::atomic<std::uint64_t> accepted_{0};
  std::atomic<std::uint64_t> dropped_{0};
};

// A worker's side: items appended to `data` (each followed by `separator`; 0: none, for
// records that know their own size), handed over in one push. Owned by the worker,
// outliving its filter chains (a reload keeps it).
class ExportBuffer {
 public:
  static constexpr std::size_t kFlushItems = 256;
  ExportBuffer(ExportQueue* queue, char separator) : queue_(queue), separator_(separator) {}
  ~ExportBuffer() { flush(); }

  bool enabled() const { return queue_ != nullptr; }
  // Where the next item is written.
  JsonBuf& data() { return buf_; }
  // The item just written is complete; it counts as `items` against the queue's bound
  // (a trace record holds several spans).
  void commit(std::size_t items = 1) {
    if (separator_) buf_.push_back(separator_);
    items_ += items;
    if (items_ >= kFlushItems) flush();
  }
  // Hands what was collected to the exporter (the worker's periodic flush, and its stop).
  void flush();

 private:
  ExportQueue* queue_;
  char separator_;
  JsonBuf buf_;  // kept across batches: its memory is reused
  std::size_t items_ = 0;
};

}  // namespace tahua
