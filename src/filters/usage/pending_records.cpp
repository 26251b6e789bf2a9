#include "filters/usage/pending_records.h"

#include "filters/worker_services.h"
#include "telemetry/export_queue.h"
#include "telemetry/trace_context.h"
#include "telemetry/usage_record.h"

namespace tahua {
namespace {

// A record's id sits at a fixed place: {"record_id":"<36 characters>"
constexpr std::size_t kIdAt = 14;
constexpr std::size_t kIdSize = 36;

}  // namespace

PendingRecords::PendingRecords(ExportBuffer& out, WorkerServices& services, Millis wait, std::size_t max_held)
    : out_(out), services_(services), wait_(wait), max_held_(max_held) {}

PendingRecords::~PendingRecords() { writeHeld(); }

void PendingRecords::writeHeld() {
  for (auto& [id, h] : held_) {
    if (h.timer) h.timer->cancel();
    if (!h.written) write(h.record);
  }
  held_.clear();
}

void PendingRecords::write(std::string_view record) {
  appendUsageJson(out_.data(), record);
  out_.commit();
}

void PendingRecords::hold(std::string key, std::string record) {
  if (record.find(kPending) == std::string::npos || held_.size() >= max_held_ || held_.count(key)) {
    write(record);
    return;
  }
  Held& h = held_[key];
  h.record = std::move(record);
  h.timer = services_.runAfter(wait_, [this, key] { expire(key); });
}

void PendingRecords::expire(const std::string& key) {
  auto it = held_.find(key);
  if (it == held_.end()) return;
  Held& h = it->second;
  if (!h.written) {
    // The verdict is late: the record goes as it is; its verdict comes in a second one.
    write(h.record);
    h.written = true;
    h.timer = services_.runAfter(Millis(60'000) + wait_, [this, key] { expire(key); });
    return;
  }
  held_.erase(it);  // no verdict ever came (the check's own timeout is far shorter)
}

void PendingRecords::settle(std::string_view key, std::string_view fields) {
  auto it = held_.find(std::string(key));
  if (it == held_.end()) return;
  Held& h = it->second;
  std::string record = std::move(h.record);
  const bool second = h.written;
  if (h.timer) h.timer->cancel();
  held_.erase(it);
  const std::size_t at = record.find(kPending);
  if (at == std::string::npos) return;
  record.replace(at, kPending.size(), fields);
  if (second && record.size() > kIdAt + kIdSize) {
    const std::string first(record, kIdAt, kIdSize);
    char id[kIdSize];
    uuidV7(id);
    record.replace(kIdAt, kIdSize, id, kIdSize);
    record.insert(kIdAt + kIdSize + 1, ",\"supersedes\":\"" + first + "\"");
  }
  write(record);
}

}  // namespace tahua
