// The filter API (src/filters/filter.h) without sockets: per-request State laid out by
// the chain, Stop / Pause / resume, response data rewriting, and the bulkhead filter's
// wait in line driven by a fake worker.
#include "filters/filter.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "filters/bulkhead/bulkhead_filter.h"
#include "filters/bulkhead/concurrency_limit.h"
#include "filters/secrets/secret_filter.h"
#include "telemetry/metrics.h"

namespace tahua {
namespace filter_chain_test {  // named, not anonymous: eight test files compile as one unit

// Records the order of calls; keeps a per-request counter in its State.
struct Counter {
  int calls = 0;
  std::string seen;
  static inline int alive = 0;
  Counter() { ++alive; }
  ~Counter() { --alive; }
};

class CountingFilter final : public FilterWithState<Counter> {
 public:
  CountingFilter(std::string tag, std::vector<std::string>& log, FilterStatus answer = FilterStatus::Continue)
      : tag_(std::move(tag)), log_(log), answer_(answer) {}
  std::string_view name() const override { return tag_; }
  FilterStatus onRequestHeaders(RequestContext& ctx) override {
    ++state(ctx).calls;
    log_.push_back(tag_);
    return answer_;
  }
  void onComplete(RequestContext& ctx) override { log_.push_back(tag_ + ":done:" + std::to_string(state(ctx).calls)); }

 private:
  std::string tag_;
  std::vector<std::string>& log_;
  FilterStatus answer_;
};

// Upper-cases every piece; holds nothing.
class UpperFilter final : public FilterWithState<std::string> {
 public:
  std::string_view name() const override { return "upper"; }
  bool wantsResponseData() const override { return true; }
  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    std::string& out = state(ctx);
    out.assign(data.bytes());
    for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    data.replace(out);
    if (out.find("STOP") != std::string::npos) data.fail(Error{ErrorKind::UpstreamBadResponse, "stop word"});
  }
};

struct Block {
  explicit Block(const FilterChain& chain) : storage((chain.stateBytes() + sizeof(std::max_align_t)) / sizeof(std::max_align_t) + 1) {}
  std::byte* get() { return reinterpret_cast<std::byte*>(storage.data()); }
  std::vector<std::max_align_t> storage;
};

TEST(FilterChain, EachFilterGetsItsOwnStateMadeAndDestroyedPerRequest) {
  std::vector<std::string> log;
  FilterChain chain;
  chain.add(std::make_unique<CountingFilter>("a", log));
  chain.add(std::make_unique<CountingFilter>("b", log));
  EXPECT_GE(chain.stateBytes(), 2 * sizeof(Counter));
  Block block(chain);
  for (int request = 0; request < 2; ++request) {
    RequestContext ctx;
    chain.begin(ctx, block.get());
    EXPECT_EQ(Counter::alive, 2);
    std::size_t next = 0;
    EXPECT_EQ(chain.run(RequestPhase::Headers, ctx, next), FilterStatus::Continue);
    chain.complete(ctx);
    EXPECT_EQ(Counter::alive, 0);
  }
  // Fresh State per request: each count is 1, never 2.
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b", "a:done:1", "b:done:1", "a", "b", "a:done:1", "b:done:1"}));
}

TEST(FilterChain, StopEndsThePhaseAndAnErrorWithoutStopStopsToo) {
  std::vector<std::string> log;
  FilterChain chain;
  chain.add(std::make_unique<CountingFilter>("a", log, FilterStatus::Stop));
  chain.add(std::make_unique<CountingFilter>("b", log));
  Block block(chain);
  RequestContext ctx;
  chain.begin(ctx, block.get());
  std::size_t next = 0;
  EXPECT_EQ(chain.run(RequestPhase::Headers, ctx, next), FilterStatus::Stop);
  EXPECT_EQ(log, (std::vector<std::string>{"a"}));
  chain.complete(ctx);
}

TEST(FilterChain, PauseResumesWithTheFilterAfterThePausedOne) {
  std::vector<std::string> log;
  FilterChain chain;
  chain.add(std::make_unique<CountingFilter>("a", log));
  chain.add(std::make_unique<CountingFilter>("p", log, FilterStatus::Pause));
  chain.add(std::make_unique<CountingFilter>("c", log));
  Block block(chain);
  RequestContext ctx;
  chain.begin(ctx, block.get());
  std::size_t next = 0;
  EXPECT_EQ(chain.run(RequestPhase::Headers, ctx, next), FilterStatus::Pause);
  EXPECT_EQ(next, 2u);
  // The resumer said Continue: the session runs the phase on from `next`.
  EXPECT_EQ(chain.run(RequestPhase::Headers, ctx, next), FilterStatus::Continue);
  EXPECT_EQ(log, (std::vector<std::string>{"a", "p", "c"}));
  chain.complete(ctx);
}

TEST(FilterChain, ResponseDataCanBeRewrittenOrEndTheStream) {
  FilterChain chain;
  chain.add(std::make_unique<UpperFilter>());
  EXPECT_TRUE(chain.wantsResponseData());
  Block block(chain);
  RequestContext ctx;
  chain.begin(ctx, block.get());
  ResponseData a("data: hi\n\n", false);
  chain.responseData(ctx, a);
  EXPECT_EQ(a.bytes(), "DATA: HI\n\n");
  EXPECT_FALSE(a.failed());
  ResponseData b("data: stop\n\n", false);
  chain.responseData(ctx, b);
  ASSERT_TRUE(b.failed());
  EXPECT_EQ(b.takeFailure().kind, ErrorKind::UpstreamBadResponse);
  chain.complete(ctx);
}

TEST(FilterChain, ObserversOfNothingCostNothingPerPiece) {
  std::vector<std::string> log;
  FilterChain chain;
  chain.add(std::make_unique<CountingFilter>("a", log));
  EXPECT_FALSE(chain.wantsResponseData());  // the relay skips the data phase entirely
}

// Holds the answer's end: pauses once at onAnswerEnd, logs each call.
class EndHolder final : public Filter {
 public:
  EndHolder(std::string tag, std::vector<std::string>& log, FilterStatus answer) : tag_(std::move(tag)), log_(log), answer_(answer) {}
  std::string_view name() const override { return tag_; }
  bool holdsAnswerEnds() const override { return true; }
  FilterStatus onAnswerEnd(RequestContext&) override {
    log_.push_back(tag_);
    return answer_;
  }

 private:
  std::string tag_;
  std::vector<std::string>& log_;
  FilterStatus answer_;
};

TEST(FilterChain, TheAnswerEndPhaseRunsOnlyItsHoldersAndMayPause) {
  std::vector<std::string> log;
  FilterChain chain;
  chain.add(std::make_unique<CountingFilter>("a", log));
  EXPECT_FALSE(chain.holdsAnswerEnds()) << "the session then never runs the phase";
  chain.add(std::make_unique<EndHolder>("hold", log, FilterStatus::Pause));
  chain.add(std::make_unique<EndHolder>("stop", log, FilterStatus::Stop));
  chain.add(std::make_unique<EndHolder>("last", log, FilterStatus::Continue));
  EXPECT_TRUE(chain.holdsAnswerEnds());
  Block block(chain);
  RequestContext ctx;
  chain.begin(ctx, block.get());
  ctx.fail(Error{ErrorKind::UpstreamBadResponse, "an error set now changes nothing sent"});
  std::size_t next = 0;
  EXPECT_EQ(chain.run(RequestPhase::End, ctx, next), FilterStatus::Pause);
  EXPECT_EQ(next, 1u) << "counted among the holders";
  // Resumed: the others run; a Stop does not end the phase (the answer is made).
  EXPECT_EQ(chain.run(RequestPhase::End, ctx, next), FilterStatus::Continue);
  EXPECT_EQ(log, (std::vector<std::string>{"hold", "stop", "last"}));
  ResponseData piece("data: end\n\n", false);
  EXPECT_FALSE(piece.endHeld());
  piece.holdEnd();
  EXPECT_TRUE(piece.endHeld());
  chain.complete(ctx);
}

// A worker whose posted calls and timers run when the test says so.
class FakeWorker final : public WorkerServices {
 public:
  struct Timer final : TimerHandle {
    std::function<void()>* slot;
    explicit Timer(std::function<void()>* s) : slot(s) {}
    ~Timer() override { cancel(); }
    void cancel() override {
      if (slot) *slot = nullptr;
      slot = nullptr;
    }
  };
  void post(std::function<void()> fn) override { posted.push_back(std::move(fn)); }
  std::unique_ptr<TimerHandle> runAfter(Millis, std::function<void()> fn) override {
    timers.push_back(std::make_unique<std::function<void()>>(std::move(fn)));
    return std::make_unique<Timer>(timers.back().get());
  }
  void fetch(OutboundRequest, std::function<void(OutboundResponse)> done) override { done(OutboundResponse{0, "no network here", {}, {}}); }
  void runPosted() {
    while (!posted.empty()) {
      auto fn = std::move(posted.front());
      posted.pop_front();
      fn();
    }
  }
  bool fireTimer(std::size_t i) {
    if (!*timers[i]) return false;
    auto fn = std::move(*timers[i]);
    *timers[i] = nullptr;
    fn();
    return true;
  }
  std::deque<std::function<void()>> posted;
  std::vector<std::unique_ptr<std::function<void()>>> timers;
};

struct RecordingResumer final : Resumer {
  std::vector<FilterStatus> calls;
  void resume(FilterStatus s) override { calls.push_back(s); }
};

struct BulkheadFixture {
  BulkheadFixture() {
    config = std::make_shared<Config>();
    config->limits.max_concurrent_requests = 1;
    config->limits.queue_timeout = Millis(100);
    config->limits.max_queue = 1;
    bulkheads.configure(*config);
    chain.add(makeBulkheadFilter(bulkheads, *config, nullptr, metrics, worker));
  }
  void begin(RequestContext& ctx, Block& block) {
    ctx.config = config;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.resumer = &resumer;
    chain.begin(ctx, block.get());
  }
  std::shared_ptr<Config> config;
  Bulkheads bulkheads;
  WorkerMetrics metrics;
  FakeWorker worker;
  RecordingResumer resumer;
  FilterChain chain;
};

TEST(BulkheadFilter, AQueuedRequestPausesAndResumesWhenASlotFrees) {
  BulkheadFixture f;
  Block b1(f.chain), b2(f.chain);
  RequestContext first, second;
  f.begin(first, b1);
  f.begin(second, b2);
  std::size_t n1 = 0, n2 = 0;
  EXPECT_EQ(f.chain.run(RequestPhase::UpstreamSelect, first, n1), FilterStatus::Continue);
  EXPECT_EQ(f.chain.run(RequestPhase::UpstreamSelect, second, n2), FilterStatus::Pause);
  EXPECT_EQ(f.bulkheads.global().requests.waiting(), 1u);
  f.chain.complete(first);  // frees the slot: handed to the waiter, which is woken by a post
  EXPECT_TRUE(f.resumer.calls.empty());
  f.worker.runPosted();
  ASSERT_EQ(f.resumer.calls.size(), 1u);
  EXPECT_EQ(f.resumer.calls[0], FilterStatus::Continue);
  EXPECT_FALSE(second.error);
  EXPECT_FALSE(f.worker.fireTimer(0));  // the timeout was cancelled
  EXPECT_EQ(f.bulkheads.global().requests.inUse(), 1u);
  f.chain.complete(second);
  EXPECT_EQ(f.bulkheads.global().requests.inUse(), 0u);
}

TEST(BulkheadFilter, AQueuedRequestTimesOutWith429AndAThirdIsRefusedAtOnce) {
  BulkheadFixture f;
  Block b1(f.chain), b2(f.chain), b3(f.chain);
  RequestContext first, second, third;
  f.begin(first, b1);
  f.begin(second, b2);
  f.begin(third, b3);
  std::size_t n1 = 0, n2 = 0, n3 = 0;
  EXPECT_EQ(f.chain.run(RequestPhase::UpstreamSelect, first, n1), FilterStatus::Continue);
  EXPECT_EQ(f.chain.run(RequestPhase::UpstreamSelect, second, n2), FilterStatus::Pause);
  EXPECT_EQ(f.chain.run(RequestPhase::UpstreamSelect, third, n3), FilterStatus::Stop);  // max_queue 1
  ASSERT_TRUE(third.error);
  EXPECT_EQ(third.error->kind, ErrorKind::ConcurrencyLimited);
  EXPECT_TRUE(f.worker.fireTimer(0));
  ASSERT_EQ(f.resumer.calls.size(), 1u);
  EXPECT_EQ(f.resumer.calls[0], FilterStatus::Stop);
  ASSERT_TRUE(second.error);
  EXPECT_EQ(second.error->httpStatus(), 429);
  EXPECT_EQ(f.bulkheads.global().requests.waiting(), 0u);
  f.chain.complete(third);
  f.chain.complete(second);
  f.chain.complete(first);
  EXPECT_EQ(f.bulkheads.global().requests.inUse(), 0u);
}

TEST(SecretFilter, RedactsHeadersPiecesAndBodiesOfTheAnsweringProvider) {
  FilterChain chain;
  chain.add(makeSecretFilter());
  Block block(chain);
  ProviderConfig provider;
  provider.api_key = "sk-live-0123456789";
  RequestContext ctx;
  ctx.provider = &provider;
  chain.begin(ctx, block.get());
  std::vector<std::pair<std::string_view, std::string_view>> headers{{"x-echo", "Bearer sk-live-0123456789"}, {"x-ok", "1"}};
  ctx.response_headers = &headers;
  chain.responseHeaders(ctx);
  EXPECT_EQ(headers[0].second, "Bearer [redacted]");
  EXPECT_EQ(headers[1].second, "1");
  ResponseData piece("data: sk-live-01", false);
  chain.responseData(ctx, piece);
  EXPECT_EQ(piece.bytes(), "data: ");  // the possible start is held back
  ResponseData rest("23456789\n\n", true);
  chain.responseData(ctx, rest);
  EXPECT_EQ(rest.bytes(), "[redacted]\n\n");
  std::string body = R"({"k":"sk-live-0123456789"})";
  chain.responseBody(ctx, body);
  EXPECT_EQ(body, R"({"k":"[redacted]"})");
  chain.complete(ctx);
}

}  // namespace filter_chain_test
}  // namespace tahua
