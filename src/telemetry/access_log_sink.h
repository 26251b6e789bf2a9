// Where access-log lines go. Each worker appends to its own buffer (no lock per
// request) and hands it to the log file every 200 ms or past 32 KiB; the LogFile's own
// thread writes it. A worker never waits for the disk: past max_pending_bytes of lines
// not yet written, a buffer is dropped and its lines counted (tahua_log_lines_dropped_total).
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

#include "telemetry/json_out.h"

namespace tahua {

class LogFile {
 public:
  // "-" = stdout; otherwise the file is opened for append (created if needed).
  static std::shared_ptr<LogFile> open(const std::string& path, std::size_t max_pending_bytes, std::string* error);
  ~LogFile();  // writes what is pending, then stops its thread
  // Takes `lines` (whole lines) for the writer thread; drops them when too much is pending.
  void write(std::string&& lines);
  std::uint64_t droppedLines() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  LogFile(int fd, bool owned, std::size_t max_pending);
  void run();

  int fd_;
  bool owned_;
  std::size_t max_pending_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> pending_;
  std::size_t pending_bytes_ = 0;
  bool stopping_ = false;
  std::atomic<std::uint64_t> dropped_{0};
  std::thread thread_;
};

class AccessLogSink {
 public:
  explicit AccessLogSink(std::shared_ptr<LogFile> file) : file_(std::move(file)) {}
  ~AccessLogSink() { flush(); }
  // Where the line being written goes (append to it, then commit()).
  JsonBuf& line() { return buffer_; }
  void commit() {
    buffer_.push_back('\n');
    if (buffer_.size() >= kFlushBytes) flush();
  }
  void flush();

 private:
  static constexpr std::size_t kFlushBytes = 32 * 1024;
  std::shared_ptr<LogFile> file_;
  JsonBuf buffer_;  // its memory is reused
};

}  // namespace tahua
