#include "core/log.h"

#include <boost/json/serialize.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <unistd.h>

namespace tahua::log {

std::string nowRfc3339() {
  using namespace std::chrono;
  auto now = system_clock::now();
  auto secs = time_point_cast<seconds>(now);
  auto ms = duration_cast<milliseconds>(now - secs).count();
  std::time_t t = system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

void write(Level level, std::string_view msg, boost::json::object fields) {
  static constexpr std::string_view kNames[] = {"debug", "info", "warn", "error"};
  boost::json::object line;
  line.reserve(fields.size() + 3);
  line["ts"] = nowRfc3339();
  line["level"] = kNames[static_cast<int>(level)];
  line["msg"] = msg;
  for (auto& kv : fields) line[kv.key()] = std::move(kv.value());
  std::string text = boost::json::serialize(line);
  text.push_back('\n');
  // Operational logs are rare (start, reload, errors); a lock keeps lines whole.
  static std::mutex mu;
  std::lock_guard lock(mu);
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;  // stderr gone: nothing better to do than drop the line
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace tahua::log
