// What a semantic lookup costs with many entries (docs/benchmarks.md, "Response cache"):
// one index (a tenant x model) filled with N random unit vectors of D dimensions, then
// find() for a query near a kept vector (a hit) and for an unrelated one (a miss).
//   TAHUA_SEMANTIC_N (100000), TAHUA_SEMANTIC_DIM (384)
// The fill time and the index's memory are printed before the timings.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "cache/semantic_index.h"

namespace {

std::size_t envOr(const char* name, std::size_t d) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : d;
}

struct Fixture {
  std::size_t n = envOr("TAHUA_SEMANTIC_N", 100000);
  std::size_t dim = envOr("TAHUA_SEMANTIC_DIM", 384);
  tahua::SemanticIndex index{n, n, [] { return std::int64_t{0}; }};
  std::vector<float> near, far;
  Fixture() {
    std::mt19937 rng(7);
    std::normal_distribution<float> g;
    std::vector<float> v(dim);
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) {
      for (auto& x : v) x = g(rng);
      if (i == n / 2) near = v;
      index.add("t:k:m", v, "ctx", "key" + std::to_string(i), 1LL << 62);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (std::size_t d = 0; d < dim; ++d) near[d] += 0.05f * g(rng);  // a paraphrase
    far.resize(dim);
    for (auto& x : far) x = g(rng);
    const auto st = index.stats();
    std::printf("semantic index: %zu entries of %zu dims filled in %.1f s; ~%.0f MB\n", static_cast<std::size_t>(st.entries), dim, secs,
                static_cast<double>(st.bytes) / 1e6);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_SemanticHit(benchmark::State& state) {
  Fixture& f = fixture();
  std::size_t hits = 0;
  for (auto _ : state) hits += f.index.find("t:k:m", f.near, "ctx", 0.95f).has_value();
  state.counters["hit_rate"] = static_cast<double>(hits) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_SemanticHit);

void BM_SemanticMiss(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) benchmark::DoNotOptimize(f.index.find("t:k:m", f.far, "ctx", 0.95f));
}
BENCHMARK(BM_SemanticMiss);

}  // namespace

BENCHMARK_MAIN();
