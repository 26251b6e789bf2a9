// Micro-benchmark: observing a 20-event OpenAI stream (SSE parsing + usage
// extraction) as the relay does for every stream.
#include <benchmark/benchmark.h>

#include "filters/context.h"
#include "providers/mock/mock_responses.h"
#include "providers/openai/openai_adapter.h"

static void BM_PassThroughStream20Events(benchmark::State& state) {
  tahua::mock::MockRequest r;
  r.model = "gpt-4o-mini";
  r.stream = true;
  r.include_usage = true;
  r.completion_tokens = 16;
  std::string stream;
  for (int i = 0; i < tahua::mock::eventCount(r); ++i) stream += tahua::mock::streamEvent(r, i);
  for (auto _ : state) {
    auto translator = tahua::makeOpenAIPassThroughTranslator();
    tahua::RequestContext ctx;
    // Feed in network-sized pieces that cut events at arbitrary places.
    for (std::size_t at = 0; at < stream.size(); at += 97)
      benchmark::DoNotOptimize(translator->onStreamBytes(std::string_view(stream).substr(at, 97), ctx));
    benchmark::DoNotOptimize(ctx.usage.total_tokens);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
}
BENCHMARK(BM_PassThroughStream20Events);

BENCHMARK_MAIN();
