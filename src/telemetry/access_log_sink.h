// Where access-log lines go. Each worker appends to its own buffer (no lock per
// request); the buffer is written out when it grows past a threshold and by the
// worker's periodic flush. The write itself takes a process-wide lock so lines from
// different workers never interleave.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace tahua {

class LogFile {
 public:
  // "-" = stdout; otherwise the file is opened for append (created if needed).
  static std::shared_ptr<LogFile> open(const std::string& path, std::string* error);
  ~LogFile();
  void write(std::string_view bytes);

 private:
  explicit LogFile(int fd, bool owned) : fd_(fd), owned_(owned) {}
  int fd_;
  bool owned_;
  std::mutex mu_;
};

class AccessLogSink {
 public:
  explicit AccessLogSink(std::shared_ptr<LogFile> file) : file_(std::move(file)) {}
  ~AccessLogSink() { flush(); }
  void append(std::string_view line);  // line without the trailing newline
  void flush();

 private:
  static constexpr std::size_t kFlushBytes = 32 * 1024;
  std::shared_ptr<LogFile> file_;
  std::string buffer_;
};

}  // namespace tahua
