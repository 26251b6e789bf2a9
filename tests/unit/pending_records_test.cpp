// Usage records that wait for a late verdict (PendingRecords): written once with it when
// it comes within the wait, else written "pending" and then superseded by a second record
// carrying it; never dropped (a full hold, a stopping worker).
#include "filters/usage/pending_records.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "filters/worker_services.h"
#include "telemetry/export_queue.h"
#include "telemetry/usage_record.h"

namespace tahua {
namespace pending_records_test {  // named, not anonymous: eight test files compile as one unit

// Timers fire when the test says so.
class ManualServices final : public WorkerServices {
 public:
  struct Timer final : TimerHandle {
    explicit Timer(std::function<void()>* slot) : slot(slot) {}
    void cancel() override { *slot = nullptr; }
    ~Timer() override { cancel(); }
    std::function<void()>* slot;
  };
  void post(std::function<void()> fn) override { fn(); }
  std::unique_ptr<TimerHandle> runAfter(Millis, std::function<void()> fn) override {
    timers.push_back(std::make_unique<std::function<void()>>(std::move(fn)));
    return std::make_unique<Timer>(timers.back().get());
  }
  void fetch(OutboundRequest, std::function<void(OutboundResponse)>) override {}
  // Fires the timers armed so far (each once).
  void fireAll() {
    const std::size_t n = timers.size();
    for (std::size_t i = 0; i < n; ++i)
      if (auto fn = std::exchange(*timers[i], nullptr)) fn();
  }
  std::vector<std::unique_ptr<std::function<void()>>> timers;
};

const std::string kFirstId = "0190c0de-0000-7000-8000-000000000001";
std::string recordOf(const std::string& request) {
  return "{\"record_id\":\"" + kFirstId + "\",\"request_id\":\"" + request + "\",\"total_tokens\":7," +
         std::string(PendingRecords::kPending) + ",\"trace_id\":null}";
}
constexpr std::string_view kLow = R"("quality":"low","quality_similarity":0.1200)";

struct Fixture {
  ExportQueue queue{1000};
  ExportBuffer out{&queue, 0};
  ManualServices services;
  PendingRecords pending{out, services, Millis(2000), 3};

  std::vector<std::string> written() {
    out.flush();
    std::vector<std::string> lines;
    for (auto& batch : queue.take(std::chrono::milliseconds(0))) {
      JsonBuf text;  // the records as the exporter formats them
      formatUsageRecords(batch.data.view(), text);
      const std::string data(text.view());
      std::size_t at = 0, nl;
      while ((nl = data.find('\n', at)) != std::string::npos) {
        lines.push_back(data.substr(at, nl - at));
        at = nl + 1;
      }
    }
    return lines;
  }
};

TEST(PendingRecords, AVerdictWithinTheWaitIsWrittenInTheOneRecord) {
  Fixture f;
  f.pending.hold("r1", recordOf("r1"));
  EXPECT_TRUE(f.written().empty());
  EXPECT_EQ(f.pending.held(), 1u);
  f.pending.settle("r1", kLow);
  const auto lines = f.written();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "{\"record_id\":\"" + kFirstId + "\",\"request_id\":\"r1\",\"total_tokens\":7," + std::string(kLow) + ",\"trace_id\":null}");
  EXPECT_EQ(f.pending.held(), 0u);
  f.services.fireAll();  // its timer was cancelled: nothing more
  EXPECT_TRUE(f.written().empty());
}

TEST(PendingRecords, ALateVerdictSupersedesTheRecordWrittenPending) {
  Fixture f;
  f.pending.hold("r1", recordOf("r1"));
  f.services.fireAll();  // the wait is over
  auto lines = f.written();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], recordOf("r1"));
  f.pending.settle("r1", kLow);
  lines = f.written();
  ASSERT_EQ(lines.size(), 1u);
  const std::string& second = lines[0];
  EXPECT_EQ(second.find("{\"record_id\":\""), 0u);
  EXPECT_NE(second.substr(14, 36), kFirstId);  // a record id of its own
  EXPECT_EQ(second.find(",\"supersedes\":\"" + kFirstId + "\","), 51u) << second;  // right after the record's id
  EXPECT_NE(second.find(kLow), std::string::npos);
  EXPECT_EQ(second.find("pending"), std::string::npos);
  EXPECT_EQ(f.pending.held(), 0u);
}

TEST(PendingRecords, AVerdictThatNeverComesIsForgottenAfterTheRecordWentOut) {
  Fixture f;
  f.pending.hold("r1", recordOf("r1"));
  f.services.fireAll();
  EXPECT_EQ(f.written().size(), 1u);
  EXPECT_EQ(f.pending.held(), 1u);  // kept for a verdict still on its way
  f.services.fireAll();
  EXPECT_EQ(f.pending.held(), 0u);
  f.pending.settle("r1", kLow);  // too late for anything
  EXPECT_TRUE(f.written().empty());
}

TEST(PendingRecords, NothingIsDropped) {
  Fixture f;
  f.pending.settle("unknown", kLow);  // no record held: nothing written
  EXPECT_TRUE(f.written().empty());
  f.pending.hold("r1", recordOf("r1"));
  f.pending.hold("r2", recordOf("r2"));
  f.pending.hold("r3", recordOf("r3"));
  f.pending.hold("r4", recordOf("r4"));  // past max_held (3): written at once, pending
  auto lines = f.written();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], recordOf("r4"));
  f.pending.hold("plain", "{\"record_id\":\"" + kFirstId + "\"}");  // nothing pending in it: written
  EXPECT_EQ(f.written().size(), 1u);
  f.pending.writeHeld();  // the worker stops
  lines = f.written();
  EXPECT_EQ(lines.size(), 3u);
  EXPECT_EQ(f.pending.held(), 0u);
}

}  // namespace pending_records_test
}  // namespace tahua
