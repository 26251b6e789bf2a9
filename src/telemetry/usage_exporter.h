// Delivers usage records to every configured sink, at least once, never losing one
// silently:
//
//  - Workers hand records over through the ExportQueue (bounded; a full queue drops and
//    counts), packed (telemetry/usage_record.h). The exporter's thread takes them every
//    250 ms at most and formats each batch as JSON lines once, for every sink.
//  - Each sink gets each batch, on a thread of its own: a slow or hung sink (a ledger at
//    its row rate, a webhook that does not answer within its timeout) delays only its
//    own records, never another sink's nor the workers' queue. A sink that fails (Redis down, webhook 5xx, disk full)
//    gets it appended to its spill file (spill_dir/<sink>.spill) instead, and so does
//    everything after it, in order, until the spill has been replayed to the sink: a
//    retry with backoff (retry_backoff, doubling to 30 s) sends the spill from its
//    start, 1 MiB at a time; once all of it went through the file is emptied. A spill
//    left by an earlier run is replayed after a start.
//  - Past spill_max_bytes a sink's records are dropped, counted and logged; so are those
//    that find a sink's inbox holding max_queue_records already (it cannot keep up, or
//    hangs in a delivery): memory stays bounded, the other sinks get theirs.
//  - Stop (SIGTERM) delivers or spills what is queued before returning.
//  - spill_dir/usage.state records how many records were accepted and handled; a start
//    after a crash (kill -9) reports the difference as lost (at most the queue, plus
//    what workers had not handed over: 200 ms of records).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/telemetry_config.h"
#include "telemetry/export_queue.h"
#include "telemetry/usage_sinks.h"

namespace tahua {

class UsageExporter {
 public:
  // nullptr and `error` when a sink cannot be made or spill_dir is not writable.
  static std::unique_ptr<UsageExporter> start(const UsageConfig& config, std::string& error);
  ~UsageExporter();  // stop(), if not done

  ExportQueue& queue() { return queue_; }
  // Delivers or spills everything queued, then stops the thread. Workers must have
  // handed over their buffers first.
  void stop();

  struct SinkStats {
    std::string name;
    bool up = true;
    std::uint64_t delivered = 0;  // records the sink took
    std::uint64_t failures = 0;   // deliveries that failed
    std::uint64_t dropped = 0;    // past the spill bound
    std::uint64_t spill_bytes = 0;
  };
  struct Stats {
    std::uint64_t records = 0;   // handed over by workers
    std::uint64_t dropped_queue = 0;
    std::uint64_t lost_at_start = 0;  // an earlier run's records lost by a crash (usage.state)
    std::size_t depth = 0;
    std::vector<SinkStats> sinks;
  };
  Stats stats() const;

 private:
  struct Sink;
  explicit UsageExporter(const UsageConfig& config);
  void run();
  void runSink(Sink& sink);
  void handle(Sink& sink, std::string_view lines, std::size_t records);
  void refused(Sink& sink, std::string_view lines, std::size_t records);
  void replay(Sink& sink);
  void spill(Sink& sink, std::string_view lines, std::size_t records);
  void writeState(bool clean);

  UsageConfig config_;
  ExportQueue queue_;
  std::vector<std::unique_ptr<Sink>> sinks_;
  std::uint64_t handled() const;  // records every sink delivered, spilled or dropped
  std::uint64_t formatted_ = 0;   // records handed to the sinks (this thread's)
  std::size_t bytes_per_record_ = 1024;  // of the last batch formatted (this thread's)
  static constexpr std::size_t kLineSlack = 32 * 1024;  // a typical record's worst-case line bound, with room
  std::uint64_t lost_at_start_ = 0;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace tahua
