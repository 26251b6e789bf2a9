#include "telemetry/access_log_sink.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace tahua {

std::shared_ptr<LogFile> LogFile::open(const std::string& path, std::string* error) {
  if (path == "-") return std::shared_ptr<LogFile>(new LogFile(STDOUT_FILENO, false));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (error) *error = "cannot open access log \"" + path + "\": " + std::strerror(errno);
    return nullptr;
  }
  return std::shared_ptr<LogFile>(new LogFile(fd, true));
}

LogFile::~LogFile() {
  if (owned_) ::close(fd_);
}

void LogFile::write(std::string_view bytes) {
  std::lock_guard lock(mu_);
  while (!bytes.empty()) {
    ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // disk full / pipe closed: drop rather than block the worker forever
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void AccessLogSink::append(std::string_view line) {
  buffer_.append(line);
  buffer_.push_back('\n');
  if (buffer_.size() >= kFlushBytes) flush();
}

void AccessLogSink::flush() {
  if (buffer_.empty() || !file_) return;
  file_->write(buffer_);
  buffer_.clear();
}

}  // namespace tahua
