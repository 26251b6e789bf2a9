#include "telemetry/access_log_sink.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "telemetry/access_log_entry.h"
#include "core/thread_name.h"

namespace tahua {

std::shared_ptr<LogFile> LogFile::open(const std::string& path, std::size_t max_pending_bytes, std::string* error) {
  if (path == "-") return std::shared_ptr<LogFile>(new LogFile(STDOUT_FILENO, false, max_pending_bytes));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (error) *error = "cannot open access log \"" + path + "\": " + std::strerror(errno);
    return nullptr;
  }
  return std::shared_ptr<LogFile>(new LogFile(fd, true, max_pending_bytes));
}

LogFile::LogFile(int fd, bool owned, std::size_t max_pending) : fd_(fd), owned_(owned), max_pending_(max_pending) {
  thread_ = std::thread([this] {
    nameThisThread("tahua-log");
    run();
  });
}

LogFile::~LogFile() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
  if (owned_) ::close(fd_);
}

void LogFile::write(JsonBuf& entries, std::size_t count) {
  if (entries.empty()) return;
  bool taken = false;
  {
    std::lock_guard lock(mu_);
    if (pending_bytes_ + entries.size() <= max_pending_) {
      pending_bytes_ += entries.size();
      pending_.push_back(Batch{std::move(entries), count});
      taken = true;
      if (!spare_.empty()) {
        entries = std::move(spare_.back());
        spare_.pop_back();
      }
    }
  }
  if (!taken) {  // the writer is behind (a slow disk, a blocked pipe): never wait for it
    dropped_.fetch_add(count, std::memory_order_relaxed);
    entries.clear();
    return;
  }
  cv_.notify_one();
}

void LogFile::run() {
  JsonBuf lines;  // its memory is reused
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, and everything written
    Batch batch = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    lines.clear();
    formatAccessLog(batch.entries.view(), lines);
    std::string_view rest = lines.view();
    while (!rest.empty()) {
      ssize_t n = ::write(fd_, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // disk full / pipe closed: these lines are lost, counted
        dropped_.fetch_add(static_cast<std::uint64_t>(std::count(rest.begin(), rest.end(), '\n')), std::memory_order_relaxed);
        break;
      }
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
    lock.lock();
    pending_bytes_ -= batch.entries.size();
    if (spare_.size() < kSpares) {
      batch.entries.clear();
      spare_.push_back(std::move(batch.entries));
    }
  }
}

void AccessLogSink::flush() {
  if (buffer_.empty() || !file_) return;
  file_->write(buffer_, count_);
  buffer_.clear();
  count_ = 0;
}

}  // namespace tahua
