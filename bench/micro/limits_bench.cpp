// Micro-benchmarks of the tenant filters, one request per iteration, through a
// FilterChain without sockets: the key check alone (auth), and auth plus the rate-limit
// filter with four in-process counters (a request and a token limit on the tenant and
// on the key), admission, response headers and calibration included. The difference is
// what bench/limits.sh sees per request on the gateway's core, without the noise.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/sha256.h"
#include "filters/auth/auth_filter.h"
#include "filters/filter.h"
#include "filters/rate_limit/rate_limit_filter.h"
#include "store/memory_store.h"
#include "telemetry/metrics.h"
#include "tenants/tenant_directory.h"

namespace {

using namespace tahua;

constexpr const char* kKey = "tk-bench-0123456789abcdef";

class Headers final : public HeaderView {
 public:
  std::string_view get(std::string_view name) const override { return name == "authorization" ? value : std::string_view{}; }
  std::string value = std::string("Bearer ") + kKey;
};

struct World {
  explicit World(bool limits) {
    std::string yaml =
        "listeners: [{port: 0}]\nproviders: [{name: mock, type: mock}]\nmodels: [{name: bench, provider: mock}]\n";
    const std::string l = limits ? ", limits: {requests_per_minute: 100000000, tokens_per_minute: 1000000000000}" : "";
    yaml += "tenants: [{name: bench" + l + "}]\n";
    yaml += "keys: [{name: k, tenant: bench, sha256: " + toHex(sha256(kKey)) + l + "}]\n";
    auto r = loadConfigString(yaml, "bench.yaml");
    if (!r.config) throw std::runtime_error(r.error);
    config = r.config;
    std::vector<std::string> notes;
    dir = buildTenantDirectory(*config, {}, {}, notes);
    chain.add(makeAuthFilter(*config, dir, metrics));
    if (limits) chain.add(makeRateLimitFilter(*config, dir, store, metrics));
    block.resize(chain.stateBytes() / sizeof(std::max_align_t) + 2);
  }
  void request() {
    RequestContext ctx;
    ctx.config = config;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.path = "/v1/chat/completions";
    ctx.headers = &headers;
    ctx.body.assign(96, ' ');
    chain.begin(ctx, reinterpret_cast<std::byte*>(block.data()));
    std::size_t next = 0;
    chain.run(RequestPhase::Headers, ctx, next);
    ctx.model = config->findModel("bench");
    next = 0;
    chain.run(RequestPhase::UpstreamSelect, ctx, next);
    upstream_headers.clear();
    ctx.response_headers = &upstream_headers;
    chain.responseHeaders(ctx);
    ctx.response_headers = nullptr;
    ctx.status = 200;
    ctx.usage.prompt_tokens = 14;
    ctx.usage.completion_tokens = 9;
    chain.complete(ctx);
  }
  ConfigPtr config;
  TenantDirectoryPtr dir;
  MemoryStore store;
  WorkerMetrics metrics;
  FilterChain chain;
  Headers headers;
  std::vector<std::max_align_t> block;
  std::vector<std::pair<std::string_view, std::string_view>> upstream_headers;
};

void BM_Auth(benchmark::State& state) {
  World w(false);
  for (auto _ : state) w.request();
}
BENCHMARK(BM_Auth);

void BM_AuthAndLimits(benchmark::State& state) {
  World w(true);
  for (auto _ : state) w.request();
}
BENCHMARK(BM_AuthAndLimits);

void BM_Sha256OfAKey(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(sha256(kKey));
}
BENCHMARK(BM_Sha256OfAKey);

}  // namespace

BENCHMARK_MAIN();
