// The spend ledger: usage records as rows of a SQLite or PostgreSQL table
// (docs/ledger.md). A Ledger is one database connection, used by one thread (the usage
// exporter's, or `tahua --migrate`); telemetry/ledger_sink.h makes a usage sink of it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "config/telemetry_config.h"

namespace tahua {

namespace ledger {

class Ledger {
 public:
  virtual ~Ledger() = default;

  enum class Opened {
    Ok,           // connected, schema at this binary's version
    Unreachable,  // cannot connect now (a later write tries again)
    Refused,      // reached, but must not be written: a newer schema, a failed migration
  };
  // Opens the database if it is not open and, once per connection, checks its schema
  // version and migrates it under the migration lock. `error` never holds a password.
  virtual Opened open(std::string& error) = 0;
  virtual bool isOpen() const = 0;

  struct Written {
    std::size_t rows = 0;     // records taken (an already present or superseded one included)
    std::size_t skipped = 0;  // lines that are not records, left out
    std::string skip_reason;  // the first one's
    bool disk_full = false;   // SQLite: the write failed for want of space (or max_bytes)
  };
  // Writes `lines` (records, each ended by '\n'): each record_id once, a superseded
  // record never over its successor. False: nothing of the failed part was kept, the
  // caller writes all of it again (what went through before is not written twice).
  virtual bool write(std::string_view lines, Written& w, std::string& error) = 0;
  // Deletes at most `limit` rows older than `cutoff` (ISO 8601 UTC); how many, or nullopt.
  virtual std::optional<std::size_t> prune(std::string_view cutoff, std::size_t limit, std::string& error) = 0;

  int foundVersion() const { return found_version_; }  // the schema before open() migrated it

 protected:
  int found_version_ = -1;
};

std::unique_ptr<Ledger> makeSqliteLedger(const UsageSinkConfig& c);
std::unique_ptr<Ledger> makePostgresLedger(const UsageSinkConfig& c);
// The one a sqlite or postgres sink names.
std::unique_ptr<Ledger> makeLedger(const UsageSinkConfig& c);

// `tahua --migrate`: opens (and so migrates) every ledger sink of `usage`, reporting each
// on stdout; errors on stderr. 0 when all of them are at this binary's version.
int migrateLedgers(const UsageConfig& usage);

}  // namespace ledger
}  // namespace tahua
