// A usage sink over a ledger (ledger/ledger.h): its writes, its retention.
#include <chrono>
#include <cstdio>
#include <ctime>

#include "core/log.h"
#include "ledger/ledger.h"
#include "telemetry/ledger_sink.h"

namespace tahua {
namespace {

using SinkClock = std::chrono::steady_clock;

// Retention works in small deletes so that a backlog (a first start with a year of old
// rows) never holds the exporter's thread for long: kPruneBatch rows a statement, at most
// kPruneRounds statements per pass; a pass that found more comes back a second later.
constexpr std::size_t kPruneBatch = 1000;
constexpr int kPruneRounds = 5;
constexpr std::chrono::seconds kPruneEvery{600};
constexpr std::chrono::seconds kPruneBacklog{1};

std::string isoUtc(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];  // room for any int the compiler imagines
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

class LedgerSink final : public UsageSink {
 public:
  LedgerSink(const UsageSinkConfig& c, std::unique_ptr<ledger::Ledger> ledger) : c_(c), ledger_(std::move(ledger)) {}

  bool deliver(std::string_view lines, std::string& error) override {
    ledger::Ledger::Written w;
    const bool ok = ledger_->write(lines, w, error);
    if (w.skipped > 0 && SinkClock::now() - last_skip_log_ >= std::chrono::seconds(10)) {
      last_skip_log_ = SinkClock::now();
      log::error("usage lines that are not records left out of the ledger",
                 {{"sink", c_.name}, {"lines", static_cast<std::int64_t>(w.skipped)}, {"reason", w.skip_reason}});
    }
    // A full disk is the operator's to fix: said once per episode, as an error (the
    // exporter counts the failure and spills).
    if (w.disk_full && !disk_full_) log::error("ledger database full; records spill until there is room", {{"sink", c_.name}, {"error", error}});
    disk_full_ = w.disk_full;
    return ok;
  }

  void tick() override {
    if (c_.retention.count() <= 0 || !ledger_->isOpen() || SinkClock::now() < next_prune_) return;
    const std::string cutoff = isoUtc(std::chrono::system_clock::now() - c_.retention);
    std::size_t total = 0;
    bool more = false;
    for (int round = 0; round < kPruneRounds; ++round) {
      std::string error;
      const auto n = ledger_->prune(cutoff, kPruneBatch, error);
      if (!n) {
        log::warn("ledger retention failed; tried again later", {{"sink", c_.name}, {"error", error}});
        break;
      }
      total += *n;
      more = *n == kPruneBatch;
      if (!more) break;
    }
    next_prune_ = SinkClock::now() + (more ? std::chrono::seconds(kPruneBacklog) : std::chrono::seconds(kPruneEvery));
    if (total > 0) log::info("ledger rows past retention deleted", {{"sink", c_.name}, {"rows", static_cast<std::int64_t>(total)}, {"before", cutoff}});
  }

 private:
  UsageSinkConfig c_;
  std::unique_ptr<ledger::Ledger> ledger_;
  SinkClock::time_point next_prune_{};
  SinkClock::time_point last_skip_log_{};
  bool disk_full_ = false;
};

}  // namespace

std::unique_ptr<UsageSink> makeLedgerSink(const UsageSinkConfig& c, std::string& error) {
  auto ledger = ledger::makeLedger(c);
  std::string why;
  switch (ledger->open(why)) {
    case ledger::Ledger::Opened::Ok: break;
    case ledger::Ledger::Opened::Refused:
      error = why;
      return nullptr;
    case ledger::Ledger::Opened::Unreachable:
      if (c.type == UsageSinkConfig::Type::Sqlite) {  // a local file that cannot be opened is a config error
        error = why;
        return nullptr;
      }
      // Migrated when it answers; meanwhile the records spill.
      log::warn("ledger database not reachable at start; its records spill until it is", {{"sink", c.name}, {"error", why}});
      break;
  }
  return std::make_unique<LedgerSink>(c, std::move(ledger));
}

}  // namespace tahua
