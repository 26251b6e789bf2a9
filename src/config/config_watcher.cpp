#include "config/config_watcher.h"

#include "config/config.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tahua {

ConfigWatcher::ConfigWatcher(boost::asio::io_context& io, std::string path, std::function<void()> on_change,
                             Millis settle)
    : path_(std::move(path)), on_change_(std::move(on_change)), settle_(settle), events_(io), settle_timer_(io) {}

ConfigWatcher::~ConfigWatcher() { stop(); }

bool ConfigWatcher::readFile(std::string& out) const { return readConfigBytes(path_, out); }

void ConfigWatcher::rebase() { have_last_ = readFile(last_bytes_); }

bool ConfigWatcher::start(std::string* error) {
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    if (error) *error = std::string("inotify_init1: ") + std::strerror(errno);
    return false;
  }
  // A config directory is watched itself; a file through its directory.
  std::error_code dir_ec;
  std::filesystem::path dir =
      std::filesystem::is_directory(path_, dir_ec) ? std::filesystem::path(path_) : std::filesystem::path(path_).parent_path();
  if (dir.empty()) dir = ".";
  constexpr std::uint32_t kMask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_ATTRIB;
  if (::inotify_add_watch(fd, dir.c_str(), kMask) < 0) {
    if (error) *error = "inotify_add_watch " + dir.string() + ": " + std::strerror(errno);
    ::close(fd);
    return false;
  }
  events_.assign(fd);
  rebase();
  waitForEvents();
  return true;
}

void ConfigWatcher::stop() {
  stopped_ = true;
  boost::system::error_code ignored;
  settle_timer_.cancel();
  events_.close(ignored);
}

void ConfigWatcher::waitForEvents() {
  events_.async_wait(boost::asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
    if (ec || stopped_) return;
    // Drain the queue: which file changed does not matter, the content check decides.
    while (::read(events_.native_handle(), buffer_, sizeof buffer_) > 0) {
    }
    settleThenCheck();
    waitForEvents();
  });
}

// Changes come in bursts (write + rename, several symlink steps): wait until quiet.
void ConfigWatcher::settleThenCheck() {
  settle_timer_.expires_after(settle_);
  settle_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !stopped_) check();
  });
}

void ConfigWatcher::check() {
  std::string bytes;
  if (!readFile(bytes)) return;  // mid-swap or deleted: the next event brings it back
  if (have_last_ && bytes == last_bytes_) return;
  last_bytes_ = std::move(bytes);
  have_last_ = true;
  on_change_();
}

}  // namespace tahua
