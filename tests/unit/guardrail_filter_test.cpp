// The guardrail filter's bounds on a stream, through a real filter chain: the bytes it
// holds back waiting on a match that never completes, and the number of texts (choices,
// tool calls, blocks) it follows. Past either, the stream ends with an upstream error
// and nothing held is sent.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "filters/filter.h"
#include "filters/guardrails/guardrail_filter.h"
#include "filters/usage/pending_records.h"
#include "filters/worker_services.h"
#include "telemetry/export_queue.h"
#include "telemetry/metrics.h"

namespace tahua {
namespace {

class NoServices final : public WorkerServices {
 public:
  void post(std::function<void()> fn) override { fn(); }
  std::unique_ptr<TimerHandle> runAfter(Millis, std::function<void()>) override { return nullptr; }
  void fetch(OutboundRequest, std::function<void(OutboundResponse)> done) override { done(OutboundResponse{}); }
};

struct Stream {
  ConfigPtr config;
  WorkerMetrics metrics;
  NoServices services;
  ExportBuffer records{nullptr, '\n'};
  PendingRecords pending{records, services};
  FilterChain chain;
  std::vector<std::max_align_t> block;  // the chain's state block, aligned as it needs
  RequestContext ctx;
  std::string out;
  bool failed = false;
  Error error;

  Stream() {
    auto loaded = loadConfigString(
        "listeners: [{address: 127.0.0.1, port: 1}]\nproviders: [{name: m, type: mock}]\nmodels: [{name: m1, provider: m}]\n"
        "guardrails: {policies: [{name: p, rules: [{name: codes, patterns: ['\\bZX-\\d{4}\\b'], action: redact, inspect: [output]}]}]}\n",
        "t.yaml");
    config = loaded.config;
    chain.add(makeGuardrailFilter(metrics, services, pending));
    block.resize(chain.stateBytes() / sizeof(std::max_align_t) + 1);
    ctx.config = config;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.body = "{\"model\":\"m1\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    ctx.model = config->findModel("m1");
    ctx.facts.model = "m1";
    chain.begin(ctx, reinterpret_cast<std::byte*>(block.data()));
    std::size_t next = 0;
    chain.run(RequestPhase::UpstreamSelect, ctx, next);
    ctx.status = 200;
    ctx.streaming = true;
    std::vector<std::pair<std::string_view, std::string_view>> headers;
    ctx.response_headers = &headers;
    chain.responseHeaders(ctx);
    ctx.response_headers = nullptr;
  }
  ~Stream() { chain.complete(ctx); }
  void piece(const std::string& bytes, bool last = false) {
    ResponseData data(bytes, last);
    chain.responseData(ctx, data);
    out.append(data.bytes());
    if (data.failed()) {
      failed = true;
      error = data.takeFailure();
    }
  }
};

std::string chunk(int index, const std::string& content) {
  return "data: {\"choices\":[{\"index\":" + std::to_string(index) + ",\"delta\":{\"content\":\"" + content + "\"}}]}\n\n";
}

TEST(GuardrailFilter, AStreamHeldPastItsBoundEndsWithoutSendingWhatWasHeld) {
  Stream s;
  ASSERT_TRUE(s.config);
  s.piece(chunk(0, "ticket ZX-12"));  // a match that may still complete: held
  EXPECT_TRUE(s.out.empty());
  const std::string filler = chunk(1, std::string(1000, 'a'));
  for (int i = 0; i < 1100 && !s.failed; ++i) s.piece(filler);
  ASSERT_TRUE(s.failed) << "more than 1 MiB waited behind the open match";
  EXPECT_EQ(s.error.kind, ErrorKind::UpstreamBadResponse);
  EXPECT_NE(s.error.message.find("1 MiB"), std::string::npos);
  EXPECT_EQ(s.out.find("ZX-12"), std::string::npos) << "what was held is never sent";
}

TEST(GuardrailFilter, AStreamWithTooManyTextsEnds) {
  Stream s;
  for (int i = 0; i < 300 && !s.failed; ++i) s.piece(chunk(i, "x"));
  ASSERT_TRUE(s.failed);
  EXPECT_NE(s.error.message.find("more than 256"), std::string::npos);
}

TEST(GuardrailFilter, AMatchSplitOverEventsIsMaskedWhereItStarts) {
  Stream s;
  s.piece(chunk(0, "ticket ZX-1") + chunk(0, "2"));
  s.piece(chunk(0, "34 done"));
  s.piece("data: [DONE]\n\n", true);
  EXPECT_FALSE(s.failed);
  EXPECT_NE(s.out.find("\"content\":\"ticket [REDACTED]\""), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("\"content\":\"\""), std::string::npos) << "the match's rest removed from the next event: " << s.out;
  EXPECT_NE(s.out.find("\"content\":\" done\""), std::string::npos) << s.out;
  EXPECT_EQ(s.out.find("1234"), std::string::npos);
  EXPECT_NE(s.out.find("data: [DONE]\n\n"), std::string::npos);
}

}  // namespace
}  // namespace tahua
