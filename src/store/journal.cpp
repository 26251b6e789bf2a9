#include "store/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "core/json_read.h"

namespace tahua {
namespace bj = boost::json;

namespace {

bool writeAll(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

std::string stateLines(const JournalState& state) {
  std::string out;
  for (const auto& [ns, ids] : state.records)
    for (const auto& [id, doc] : ids) out += Journal::putLine(ns, id, doc);
  for (const auto& [key, q] : state.quotas) out += Journal::quotaLine(key, q);
  return out;
}

}  // namespace

std::string Journal::putLine(const std::string& ns, const std::string& id, const std::string& doc) {
  bj::object o{{"op", "put"}, {"ns", ns}, {"id", id}};
  boost::system::error_code ec;
  bj::value v = readJson(doc, ec);  // documents the gateway wrote, as deep as a body may nest
  if (ec) throw std::invalid_argument("the journal was handed a document that is not JSON: " + ec.message());
  o["doc"] = std::move(v);
  return bj::serialize(o) + "\n";
}

std::string Journal::delLine(const std::string& ns, const std::string& id) {
  return bj::serialize(bj::object{{"op", "del"}, {"ns", ns}, {"id", id}}) + "\n";
}

std::string Journal::quotaLine(const std::string& key, const JournalState::Quota& q) {
  return bj::serialize(bj::object{{"op", "quota"}, {"key", key}, {"period", q.period}, {"used", q.used}}) + "\n";
}

Journal::Journal(std::string path, JournalState& state, std::vector<std::string>& warnings, std::string& error)
    : path_(std::move(path)) {
  {
    std::ifstream in(path_, std::ios::binary);
    std::string line;
    std::size_t number = 0;
    bool torn = false;
    while (std::getline(in, line)) {
      ++number;
      if (line.empty()) continue;
      const bool last = in.peek() == std::char_traits<char>::eof();
      boost::system::error_code ec;
      bj::value v = readJson(line, ec);
      const bj::object* o = ec ? nullptr : v.if_object();
      const bj::string* op = o && o->if_contains("op") ? o->at("op").if_string() : nullptr;
      auto text = [&](std::string_view k) -> const bj::string* {
        const bj::value* f = o->if_contains(k);
        return f ? f->if_string() : nullptr;
      };
      bool ok = op != nullptr;
      if (ok && *op == "put") {
        ok = text("ns") && text("id") && o->if_contains("doc") && o->at("doc").is_object();
        if (ok) state.records[std::string(*text("ns"))][std::string(*text("id"))] = bj::serialize(o->at("doc"));
      } else if (ok && *op == "del") {
        ok = text("ns") && text("id");
        if (ok) {
          auto it = state.records.find(std::string_view(*text("ns")));
          if (it != state.records.end()) it->second.erase(std::string(*text("id")));
        }
      } else if (ok && *op == "quota") {
        const bj::value* p = o->if_contains("period");
        const bj::value* u = o->if_contains("used");
        ok = text("key") && p && p->is_int64() && u && u->is_int64();
        if (ok) state.quotas[std::string(*text("key"))] = {p->as_int64(), u->as_int64()};
      } else {
        ok = false;
      }
      if (!ok && last && in.eof() && !line.empty()) {
        torn = true;  // the last line, cut short by a crash
        break;
      }
      if (!ok) {
        error = path_ + ":" + std::to_string(number) + ": not a journal entry; refusing to start on a damaged journal";
        return;
      }
    }
    if (torn) warnings.push_back(path_ + ": dropped a torn last line (the process stopped in mid-write)");
  }
  // Start from a clean file holding exactly what was read (this also drops a torn tail).
  if (!rewrite(state)) {
    error = path_ + ": cannot write the journal: " + std::strerror(errno);
    return;
  }
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

bool Journal::append(const std::string& lines, bool sync) {
  if (fd_ < 0 || !writeAll(fd_, lines)) return false;
  bytes_ += lines.size();
  return !sync || ::fdatasync(fd_) == 0;
}

bool Journal::compactIfLarge(const JournalState& state) {
  if (bytes_ < 1024 * 1024 || bytes_ < 2 * live_bytes_) return true;
  return rewrite(state);
}

bool Journal::rewrite(const JournalState& state) {
  const std::string tmp = path_ + ".tmp";
  const std::string lines = stateLines(state);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  if (!writeAll(fd, lines) || ::fsync(fd) != 0 || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return false;
  }
  // The rename is durable once the directory is.
  const auto slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash == 0 ? 1 : slash);
  if (int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  if (fd_ >= 0) ::close(fd_);
  ::close(fd);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  bytes_ = live_bytes_ = lines.size();
  return fd_ >= 0;
}

}  // namespace tahua
