#include "telemetry/export_queue.h"

namespace tahua {

bool ExportQueue::push(ExportBatch&& batch, JsonBuf* spare) {
  if (batch.items == 0) return true;
  {
    std::lock_guard lock(mu_);
    if (closed_ || depth_.load(std::memory_order_relaxed) + batch.items > max_items_) {
      dropped_.fetch_add(batch.items, std::memory_order_relaxed);
      if (spare) {
        *spare = std::move(batch.data);
        spare->clear();
      }
      return false;
    }
    depth_.fetch_add(batch.items, std::memory_order_relaxed);
    accepted_.fetch_add(batch.items, std::memory_order_relaxed);
    batches_.push_back(std::move(batch));
    if (spare && !spares_.empty()) {
      *spare = std::move(spares_.back());
      spares_.pop_back();
    }
  }
  cv_.notify_one();
  return true;
}

void ExportQueue::recycle(std::vector<ExportBatch>& done) {
  std::lock_guard lock(mu_);
  for (auto& b : done) {
    if (spares_.size() >= kSpares) break;
    b.data.clear();
    spares_.push_back(std::move(b.data));
  }
  done.clear();
}

std::vector<ExportBatch> ExportQueue::take(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  if (batches_.empty() && !closed_) cv_.wait_for(lock, wait, [&] { return !batches_.empty() || closed_; });
  std::vector<ExportBatch> out;
  out.reserve(batches_.size());
  std::size_t items = 0;
  for (auto& b : batches_) {
    items += b.items;
    out.push_back(std::move(b));
  }
  batches_.clear();
  depth_.fetch_sub(items, std::memory_order_relaxed);
  return out;
}

void ExportQueue::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool ExportQueue::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

void ExportBuffer::flush() {
  if (!queue_ || items_ == 0) return;
  ExportBatch out{std::move(buf_), items_};
  items_ = 0;
  queue_->push(std::move(out), &buf_);  // a refusal is counted by the queue
}

}  // namespace tahua
