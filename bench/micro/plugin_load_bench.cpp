// Micro-benchmarks of loading a plugin version, the work a reload or an admin PUT does
// off the workers before the version is swapped in (docs/plugins.md, "Loading and
// replacing plugins"), for the shipped auth example plugins/client_type_auth.lua:
//
//   BM_Compile    compile the Lua text to a chunk and instantiate it once in a scratch
//                 sandbox (compilePlugin: the syntax and the phases checked)
//   BM_SelfTests  run its four manifest tests (runPluginTests: a fresh sandbox, four
//                 on_auth calls)
//   BM_Load       both: what one version costs to load
//   BM_Runtime    a worker's first Lua state for it, from the compiled chunk (what the
//                 first request on each worker pays after a swap)
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>
#include <string>

#include "config/plugin_config.h"
#include "plugins/plugin_host.h"
#include "telemetry/metrics.h"

namespace {

using namespace tahua;

std::string source() {
  std::ifstream in(TAHUA_SOURCE_DIR "/plugins/client_type_auth.lua");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

PluginConfig manifest() {
  PluginConfig p;
  p.id = "client-type-auth";
  auto test = [](std::string type, std::string extra, std::string value, bool deny, bool auth, std::string tenant, std::string key) {
    PluginTest t;
    t.phase = kPluginAuth;
    t.headers = {{"x-client-type", std::move(type)}};
    if (!extra.empty()) t.headers.emplace_back(std::move(extra), std::move(value));
    t.expect_deny = deny;
    t.expect_authenticate = auth;
    t.expect_tenant = std::move(tenant);
    t.expect_key = std::move(key);
    return t;
  };
  p.tests.push_back(test("Mobile", "x-device-token", "dev_a1b2c3", false, true, "mobile-apps", "mobile-app"));
  p.tests.push_back(test("web", "", "", true, false, "", ""));
  p.tests.push_back(test("fridge", "", "", true, false, "", ""));
  PluginTest pass;
  pass.phase = kPluginAuth;
  pass.headers = {{"authorization", "Bearer sk-something"}};
  p.tests.push_back(pass);
  return p;
}

void BM_Compile(benchmark::State& state) {
  const std::string src = source();
  for (auto _ : state) {
    PluginConfig p = manifest();
    if (!compilePlugin(p, src).empty()) state.SkipWithError("does not compile");
    benchmark::DoNotOptimize(p.bytecode);
  }
}
BENCHMARK(BM_Compile)->Unit(benchmark::kMicrosecond);

void BM_SelfTests(benchmark::State& state) {
  PluginConfig p = manifest();
  if (!compilePlugin(p, source()).empty()) state.SkipWithError("does not compile");
  for (auto _ : state)
    if (!runPluginTests(p).empty()) state.SkipWithError("self-tests fail");
}
BENCHMARK(BM_SelfTests)->Unit(benchmark::kMicrosecond);

void BM_Load(benchmark::State& state) {
  const std::string src = source();
  for (auto _ : state) {
    PluginConfig p = manifest();
    if (!compilePlugin(p, src).empty() || !runPluginTests(p).empty()) state.SkipWithError("does not load");
  }
}
BENCHMARK(BM_Load)->Unit(benchmark::kMicrosecond);

void BM_Runtime(benchmark::State& state) {
  PluginConfig p = manifest();
  if (!compilePlugin(p, source()).empty()) state.SkipWithError("does not compile");
  WorkerMetrics metrics;
  for (auto _ : state) {
    PluginInstance in(p, metrics);
    benchmark::DoNotOptimize(in.runtime());
  }
}
BENCHMARK(BM_Runtime)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
