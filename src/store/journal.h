// The in-process store's file: state that cannot be rebuilt (admin-created tenants and
// keys, quota consumption) as JSON lines, appended as it changes and read back at start.
//
//   {"op":"put","ns":"keys","id":"ci-bot","doc":{...}}     a record written
//   {"op":"del","ns":"keys","id":"ci-bot"}                  a record erased
//   {"op":"quota","key":"tahua:{t:a}:tenant:tpd","period":20423,"used":1234}
//
// fsync policy: a record operation is fsynced before the admin API answers (rare, and
// a key shown to its owner must exist after a crash); quota lines are appended by the
// periodic flush without fsync (a process crash loses nothing, a machine crash up to
// the page cache's write-back); a compaction writes the live set to a new file, fsyncs
// it and renames it over the old one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tahua {

struct JournalState {
  // ns -> id -> JSON document
  std::map<std::string, std::map<std::string, std::string>, std::less<>> records;
  struct Quota {
    std::int64_t period = 0;
    std::int64_t used = 0;
  };
  std::map<std::string, Quota, std::less<>> quotas;
};

class Journal {
 public:
  // Opens (creating) `path` and replays it into `state`. A torn last line (a crash in
  // mid-write) is dropped with a warning; any other bad line is an error naming its
  // line number, and `error` is set (the gateway refuses to start on it).
  Journal(std::string path, JournalState& state, std::vector<std::string>& warnings, std::string& error);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends lines; `sync` fsyncs them. False if the write failed (disk full, ...).
  bool append(const std::string& lines, bool sync);
  // Rewrites the file as `state` alone when it has grown past twice the live size.
  bool compactIfLarge(const JournalState& state);
  std::uint64_t bytes() const { return bytes_; }

  static std::string putLine(const std::string& ns, const std::string& id, const std::string& doc);
  static std::string delLine(const std::string& ns, const std::string& id);
  static std::string quotaLine(const std::string& key, const JournalState::Quota& q);

 private:
  bool rewrite(const JournalState& state);
  std::string path_;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;
  std::uint64_t live_bytes_ = 0;  // the size a compacted file had
};

}  // namespace tahua
