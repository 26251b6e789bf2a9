// Micro-benchmarks of the stream path: observing a 20-event OpenAI stream (SSE parsing
// + usage extraction) as the pass-through relay does, and translating a 20-event
// Anthropic stream into OpenAI chunks as the anthropic adapter does for OpenAI clients.
#include <benchmark/benchmark.h>

#include "request/request_context.h"
#include "providers/mock/mock_responses.h"
#include "providers/translation.h"

namespace {

std::string anthropicStream20() {
  std::string s =
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\","
      "\"role\":\"assistant\",\"model\":\"claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
      "\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
  for (int i = 0; i < 16; ++i)
    s += "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
         "\"text\":\" word" + std::to_string(i) + "\"}}\n\n";
  s += "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
       "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},"
       "\"usage\":{\"output_tokens\":16}}\n\n"
       "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  return s;
}

}  // namespace

static void BM_PassThroughStream20Events(benchmark::State& state) {
  tahua::mock::MockRequest r;
  r.model = "gpt-4o-mini";
  r.stream = true;
  r.include_usage = true;
  r.completion_tokens = 16;
  std::string stream;
  for (int i = 0; i < tahua::mock::eventCount(r); ++i) stream += tahua::mock::streamEvent(r, i);
  for (auto _ : state) {
    auto translator = tahua::makePassThroughTranslator(tahua::WireFormat::OpenAIChat, false);
    tahua::RequestContext ctx;
    // Feed in network-sized pieces that cut events at arbitrary places.
    for (std::size_t at = 0; at < stream.size(); at += 97)
      benchmark::DoNotOptimize(translator->onStreamBytes(std::string_view(stream).substr(at, 97), false, ctx));
    benchmark::DoNotOptimize(ctx.usage.total_tokens);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
}
BENCHMARK(BM_PassThroughStream20Events);

// Anthropic upstream -> OpenAI client, through the adapter's real translator.
static void BM_TranslateAnthropicStream20Events(benchmark::State& state) {
  const std::string stream = anthropicStream20();
  tahua::ProviderConfig provider;
  provider.type = "anthropic";
  tahua::ProviderRuntime rt;
  rt.config = &provider;
  rt.adapter = tahua::makeAnthropicAdapter();
  for (auto _ : state) {
    tahua::RequestContext ctx;
    ctx.endpoint = tahua::Endpoint::ChatCompletions;
    ctx.facts.model = "claude";
    ctx.facts.stream = true;
    const tahua::UpstreamRequest request;
    auto translator = rt.adapter->responseTranslator(ctx, request, rt);
    tahua::ResponseHead head;
    head.status = 200;
    translator->onResponseHead(head, ctx);
    for (std::size_t at = 0; at < stream.size(); at += 97) {
      const bool last = at + 97 >= stream.size();
      benchmark::DoNotOptimize(translator->onStreamBytes(std::string_view(stream).substr(at, 97), last, ctx));
    }
    benchmark::DoNotOptimize(ctx.usage.total_tokens);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
}
BENCHMARK(BM_TranslateAnthropicStream20Events);

BENCHMARK_MAIN();
