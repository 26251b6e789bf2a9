// Micro-benchmarks of the guardrail filter, through a real filter chain (docs/benchmarks.md,
// "Guardrails"): the request phase on a 4 KB prompt with 50 patterns (40 literals, 10
// regexes) and every PII detector, against the same request with no policy attached; and
// a streamed answer of 341 events (2 KB of text) through onResponseData, against none.
#include <benchmark/benchmark.h>

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

namespace {

using namespace tahua;

class NoServices final : public WorkerServices {
 public:
  void post(std::function<void()> fn) override { fn(); }
  std::unique_ptr<TimerHandle> runAfter(Millis, std::function<void()>) override { return nullptr; }
  void fetch(OutboundRequest, std::function<void(OutboundResponse)> done) override { done(OutboundResponse{}); }
};

std::string policiesYaml(bool attached) {
  std::string y =
      "listeners: [{address: 127.0.0.1, port: 1}]\n"
      "providers: [{name: m, type: mock}]\n"
      "models: [{name: bench, provider: m}, {name: other, provider: m}]\n"
      "guardrails:\n  policies:\n";
  const char* match = attached ? "" : "    match: {model: other}\n";
  y += "  - name: words\n";
  y += match;
  y += "    rules:\n    - name: literals\n      caseless: true\n      action: block\n      inspect: [input, system, output]\n      literals: [";
  const char* trees[] = {"alder", "birch", "cedar", "dogwood", "elm", "fir", "ginkgo", "hazel", "ironwood", "juniper",
                         "kapok", "larch", "maple", "nutmeg", "oak", "pine", "quince", "rowan", "spruce", "teak"};
  const char* places[] = {"aurora", "borealis", "comet", "dune", "eclipse", "falcon", "glacier", "harbor", "island", "jetty",
                          "kestrel", "lagoon", "meteor", "nebula", "orbit", "pulsar", "quasar", "rocket", "summit", "tundra"};
  for (const char* t : trees) y += std::string("\"codename-") + t + "\", ";
  for (const char* p : places) y += std::string("\"project ") + p + "\", ";
  y.resize(y.size() - 2);
  y += "]\n    - name: regexes\n      action: block\n      inspect: [input, system, output]\n      patterns: ["
       "'\\bproj-[a-z]{3}-\\d{4}\\b', '\\bticket\\s+#\\d{6}\\b', '\\binternal-[a-z]{4,8}\\.corp\\b', '\\bemp\\d{7}\\b', "
       "'\\bINV-\\d{4}-\\d{4}\\b', '\\bcustomer\\s+id\\s+\\d{8}\\b', '\\bbuild-\\d{5}-[a-f0-9]{6}\\b', '\\bvault:[a-z]{3,10}\\b', "
       "'\\bsecret-[A-Z]{2}\\d{3}\\b', '\\bDB_[A-Z]{3,8}_PASS\\b']\n";
  y += "  - name: pii\n";
  y += match;
  y += "    rules: [{name: pii, pii: all, action: redact, inspect: [input, system, output]}]\n";
  return y;
}

std::string prompt4k() {
  const std::string words =
      "the quarterly report shows steady growth in the northern region while costs in logistics rose slightly because of "
      "fuel prices and the team expects the new warehouse to open next spring ";
  std::string text;
  while (text.size() < 4000) text += words;
  text.resize(4000);
  return "{\"model\":\"bench\",\"messages\":[{\"role\":\"system\",\"content\":\"You are a helpful analyst.\"},"
         "{\"role\":\"user\",\"content\":\"" + text + "\"}]}";
}

struct Bench {
  ConfigPtr config;
  WorkerMetrics metrics;
  NoServices services;
  ExportBuffer records{nullptr, 0};
  PendingRecords pending{records, services};
  FilterChain chain;
  std::vector<std::max_align_t> block;  // the chain's state block, aligned as it needs
  explicit Bench(bool attached) {
    auto loaded = loadConfigString(policiesYaml(attached), "bench");
    if (!loaded.config) throw std::runtime_error(loaded.error);
    config = loaded.config;
    chain.add(makeGuardrailFilter(metrics, services, pending));
    block.resize(chain.stateBytes() / sizeof(std::max_align_t) + 1);
  }
  void start(RequestContext& ctx, const std::string& body) {
    ctx.config = config;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.body = body;
    ctx.model = config->findModel("bench");
    ctx.facts.model = "bench";
    chain.begin(ctx, reinterpret_cast<std::byte*>(block.data()));
  }
};

void requestPhase(benchmark::State& state, bool attached) {
  Bench b(attached);
  const std::string body = prompt4k();
  for (auto _ : state) {
    RequestContext ctx;
    b.start(ctx, body);
    std::size_t next = 0;
    benchmark::DoNotOptimize(b.chain.run(RequestPhase::UpstreamSelect, ctx, next));
    b.chain.complete(ctx);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

std::string event(const std::string& content) {
  return "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"bench\","
         "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + content + "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
}

void streamPhase(benchmark::State& state, bool attached) {
  Bench b(attached);
  std::vector<std::string> events;
  for (int i = 0; i < 341; ++i) events.push_back(event(" token"));
  events.push_back(
      "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"bench\","
      "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
  const std::string body = "{\"model\":\"bench\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
  std::vector<std::pair<std::string_view, std::string_view>> headers;
  for (auto _ : state) {
    RequestContext ctx;
    b.start(ctx, body);
    std::size_t next = 0;
    b.chain.run(RequestPhase::UpstreamSelect, ctx, next);
    ctx.status = 200;
    ctx.streaming = true;
    headers.clear();
    ctx.response_headers = &headers;
    b.chain.responseHeaders(ctx);
    ctx.response_headers = nullptr;
    for (std::size_t i = 0; i < events.size(); ++i) {
      ResponseData data(events[i], i + 1 == events.size());
      b.chain.responseData(ctx, data);
      benchmark::DoNotOptimize(data.bytes().size());
    }
    b.chain.complete(ctx);
  }
  state.counters["events"] = static_cast<double>(events.size());
}

}  // namespace

static void BM_Request4KBNoPolicy(benchmark::State& s) { requestPhase(s, false); }
static void BM_Request4KB50PatternsAndPii(benchmark::State& s) { requestPhase(s, true); }
static void BM_Stream341EventsNoPolicy(benchmark::State& s) { streamPhase(s, false); }
static void BM_Stream341Events50PatternsAndPii(benchmark::State& s) { streamPhase(s, true); }
BENCHMARK(BM_Request4KBNoPolicy);
BENCHMARK(BM_Request4KB50PatternsAndPii);
BENCHMARK(BM_Stream341EventsNoPolicy);
BENCHMARK(BM_Stream341Events50PatternsAndPii);
BENCHMARK_MAIN();
