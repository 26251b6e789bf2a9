// Usage records that wait for a verdict reached after their request ended (the
// guardrails' asynchronous answer-quality check). A record whose `quality` is still
// "pending" when the request completes is held, up to `wait` (2 s), and written as soon
// as the verdict comes; past `wait` it is written as it is ("pending"), and the verdict,
// when it comes, is written as a second record: the same fields with the verdict, a new
// record_id, and `supersedes` naming the first (a billing pipeline keeps the later one).
// Nothing is dropped: over `max_held` records, one is written at once as pending, and a
// stopping worker writes what it still holds.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/duration.h"

namespace tahua {

class ExportBuffer;
class TimerHandle;
class WorkerServices;

class PendingRecords {
 public:
  PendingRecords(ExportBuffer& out, WorkerServices& services, Millis wait = Millis(2000), std::size_t max_held = 10000);
  ~PendingRecords();
  PendingRecords(const PendingRecords&) = delete;
  PendingRecords& operator=(const PendingRecords&) = delete;

  // The placeholder a record carries for the quality fields until the verdict comes.
  static constexpr std::string_view kPending = R"("quality":"pending","quality_similarity":null)";

  // A request's key: its id (the client may choose it, and reuse it) and when it started.
  static std::string keyOf(std::string_view request_id, std::chrono::steady_clock::time_point start) {
    return std::string(request_id) + '@' + std::to_string(start.time_since_epoch().count());
  }

  // `record` (one whole record, without the buffer's separator) holds kPending once.
  void hold(std::string key, std::string record);
  // The verdict for the request of `key`: `fields` replaces kPending
  // (`"quality":"low","quality_similarity":0.12`). Ignored for a request with no record
  // held (usage records off, or written whole).
  void settle(std::string_view key, std::string_view fields);
  // Writes every record not written yet as it is (a worker stopping), and forgets them all.
  void writeHeld();
  std::size_t held() const { return held_.size(); }

 private:
  struct Held {
    std::string record;
    bool written = false;  // written as pending (past `wait`); kept for the verdict's record
    std::unique_ptr<TimerHandle> timer;
  };
  void write(std::string_view record);
  void expire(const std::string& key);

  ExportBuffer& out_;
  WorkerServices& services_;
  Millis wait_;
  std::size_t max_held_;
  std::unordered_map<std::string, Held> held_;
};

}  // namespace tahua
