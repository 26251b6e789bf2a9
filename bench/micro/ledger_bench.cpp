// Rows per second into the spend ledger (src/ledger/), without the gateway: each
// iteration writes one delivery of `range(0)` records (realistic ones, ~750 bytes of
// JSON, fresh ids) through the same Ledger::write the usage exporter calls, parsing
// included. SQLite: a file in /tmp (WAL, synchronous=FULL). PostgreSQL: the server the
// libpq connection string in TAHUA_BENCH_PG_DSN names (skipped without it), batch 500.
//   build/tahua_ledger_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "ledger/ledger.h"

namespace {

using namespace tahua;

std::string records(std::size_t n, std::uint64_t& next) {
  std::string out;
  char id[40];
  for (std::size_t i = 0; i < n; ++i, ++next) {
    std::snprintf(id, sizeof id, "0193a1b2-c3d4-7e5f-8a9b-%012llx", static_cast<unsigned long long>(next));
    out += "{\"record_id\":\"";
    out += id;
    out += "\",\"request_id\":\"req-";
    out += std::to_string(next);
    out +=
        "\",\"ts\":\"2026-12-05T10:00:00.123Z\",\"end_ts\":\"2026-12-05T10:00:01.456Z\",\"gateway\":\"replica-1\","
        "\"tenant\":\"team-a\",\"key\":\"a-main\",\"key_prefix\":\"tk-a\",\"api\":\"openai\",\"method\":\"POST\","
        "\"path\":\"/v1/chat/completions\",\"requested_model\":\"gpt-4o-mini\",\"model\":\"gpt-4o-mini\",\"provider\":\"openai\","
        "\"deployment\":\"openai-0\",\"version\":null,\"route_name\":null,\"stream\":true,\"status\":200,\"end_reason\":\"done\","
        "\"error\":null,\"replayed\":false,\"prompt_tokens\":1234,\"completion_tokens\":321,\"cached_tokens\":0,"
        "\"total_tokens\":1555,\"images\":null,\"audio_seconds\":null,\"characters\":null,\"usage_source\":\"upstream\","
        "\"cost_usd\":0.0003777,\"duration_ms\":1333.2,\"ttft_ms\":210.5,\"bytes_out\":4567,\"attempts\":1,\"fallback\":null,"
        "\"cache\":null,\"cache_tokens_saved\":null,\"prompt\":null,\"guardrails\":null,\"guardrail_signals\":null,"
        "\"guardrails_unchecked\":null,\"quality\":null,\"quality_similarity\":null,\"mcp_method\":null,\"mcp_tool\":null,"
        "\"mcp_outcome\":null,\"mcp_arguments\":null,\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\"}\n";
  }
  return out;
}

void run(benchmark::State& state, ledger::Ledger& l) {
  std::uint64_t next = 1;
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    const std::string batch = records(n, next);
    state.ResumeTiming();
    ledger::Ledger::Written w;
    std::string error;
    if (!l.write(batch, w, error)) {
      state.SkipWithError(error.c_str());
      return;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_SqliteWrite(benchmark::State& state) {
  const std::string dir = "/tmp/tahua-ledger-bench-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  UsageSinkConfig c;
  c.type = UsageSinkConfig::Type::Sqlite;
  c.path = dir + "/ledger.db";
  {
    auto l = ledger::makeSqliteLedger(c);
    std::string error;
    if (l->open(error) != ledger::Ledger::Opened::Ok) {
      state.SkipWithError(error.c_str());
      return;
    }
    run(state, *l);
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_SqliteWrite)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_PostgresWrite(benchmark::State& state) {
  const char* dsn = std::getenv("TAHUA_BENCH_PG_DSN");
  if (!dsn || !*dsn) {
    state.SkipWithError("TAHUA_BENCH_PG_DSN is not set");
    return;
  }
  UsageSinkConfig c;
  c.type = UsageSinkConfig::Type::Postgres;
  c.dsn = dsn;
  c.timeout = Millis(30'000);
  auto l = ledger::makePostgresLedger(c);
  std::string error;
  if (l->open(error) != ledger::Ledger::Opened::Ok) {
    state.SkipWithError(error.c_str());
    return;
  }
  run(state, *l);
}
BENCHMARK(BM_PostgresWrite)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
