// Where access-log lines go. Each worker appends entries (telemetry/access_log_entry.h:
// the request's numbers and strings, packed, no JSON) to its own buffer (no lock per
// request) and hands it to the log file every 200 ms or past 32 KiB; the LogFile's own
// thread formats the lines and writes them. A worker never waits for the disk: past
// max_pending_bytes of entries not yet written, a buffer is dropped and its lines
// counted (tahua_log_lines_dropped_total).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "telemetry/json_out.h"

namespace tahua {

class LogFile {
 public:
  // "-" = stdout; otherwise the file is opened for append (created if needed).
  static std::shared_ptr<LogFile> open(const std::string& path, std::size_t max_pending_bytes, std::string* error);
  ~LogFile();  // writes what is pending, then stops its thread
  // Takes `entries` (`count` whole AccessLogEntry records) for the writer thread, which
  // formats and writes them; drops them when too much is pending. The buffer itself goes
  // (no copy); `entries` is left empty, with the memory of one the writer is done with
  // when there is one.
  void write(JsonBuf& entries, std::size_t count);
  std::uint64_t droppedLines() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  LogFile(int fd, bool owned, std::size_t max_pending);
  void run();

  // Written batches' buffers kept for the workers (a flush gets one back instead of
  // growing a new one); past this many workers, some flushes allocate.
  static constexpr std::size_t kSpares = 8;

  int fd_;
  bool owned_;
  std::size_t max_pending_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Batch {
    JsonBuf entries;
    std::size_t count = 0;
  };
  std::deque<Batch> pending_;
  std::vector<JsonBuf> spare_;  // written batches' buffers, for the workers to fill again
  std::size_t pending_bytes_ = 0;
  bool stopping_ = false;
  std::atomic<std::uint64_t> dropped_{0};
  std::thread thread_;
};

class AccessLogSink {
 public:
  explicit AccessLogSink(std::shared_ptr<LogFile> file) : file_(std::move(file)) {}
  ~AccessLogSink() { flush(); }
  // Where the entry being written goes (AccessLogEntryWriter, then commit()).
  JsonBuf& entries() { return buffer_; }
  void commit() {
    ++count_;
    if (buffer_.size() >= kFlushBytes) flush();
  }
  void flush();

 private:
  static constexpr std::size_t kFlushBytes = 32 * 1024;
  std::shared_ptr<LogFile> file_;
  JsonBuf buffer_;  // its memory is reused
  std::size_t count_ = 0;  // entries in buffer_
};

}  // namespace tahua
