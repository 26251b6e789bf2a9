// Watches the config file (or directory) for changes with inotify and reports when its
// bytes changed (for a directory: any of its yaml files, added or removed).
// It watches the file's directory, not the file: editors save by renaming over the
// file and Kubernetes swaps a ConfigMap by renaming a `..data` symlink, and both replace
// the inode a file watch would be attached to.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <string>

#include "core/duration.h"

namespace tahua {

class ConfigWatcher {
 public:
  ConfigWatcher(boost::asio::io_context& io, std::string path, std::function<void()> on_change,
                Millis settle = Millis(200));
  ~ConfigWatcher();

  // Starts watching; false (with `error` set) if inotify is unavailable.
  bool start(std::string* error);
  void stop();
  // Takes the file's current bytes as the baseline (after a reload from elsewhere).
  void rebase();

 private:
  void waitForEvents();
  void settleThenCheck();
  void check();
  bool readFile(std::string& out) const;

  std::string path_;
  std::function<void()> on_change_;
  Millis settle_;
  boost::asio::posix::stream_descriptor events_;
  boost::asio::steady_timer settle_timer_;
  std::string last_bytes_;
  bool have_last_ = false;
  bool stopped_ = false;
  char buffer_[4096];
};

}  // namespace tahua
