// Rows per second into the spend ledger (src/ledger/), without the gateway: each
// iteration writes one delivery of `range(0)` records (realistic ones, ~750 bytes of
// JSON, fresh ids) through the same Ledger::write the usage exporter calls, parsing
// included. SQLite: a file in /tmp (WAL, synchronous=FULL). PostgreSQL: the server the
// libpq connection string in TAHUA_BENCH_PG_DSN names (skipped without it), batch 500.
// BM_SinkDelivery: what the usage exporter's thread pays per record (its CPU time, the
// database server's not counted) to deliver 100 records (200 ms of a replica at 500
// requests/s) through each sink as the exporter calls it: the Redis stream (the server
// TAHUA_BENCH_REDIS_URL names), the SQLite ledger with and without its rollups' triggers,
// and the PostgreSQL ledger. A worker pays the same for every sink: it formats the record
// and hands it to the exporter's queue (telemetry/usage_exporter.h).
//   build/tahua_ledger_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <sqlite3.h>

#include "ledger/ledger.h"
#include "telemetry/usage_sinks.h"

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

// The sink as the exporter calls it, per record: the thread's CPU time over the records.
void deliverThrough(benchmark::State& state, UsageSink& sink) {
  std::uint64_t next = 1;
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    const std::string batch = records(n, next);
    state.ResumeTiming();
    std::string error;
    if (!sink.deliver(batch, error)) {
      state.SkipWithError(error.c_str());
      return;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_SinkDelivery_RedisStream(benchmark::State& state) {
  const char* url = std::getenv("TAHUA_BENCH_REDIS_URL");
  if (!url || !*url) {
    state.SkipWithError("TAHUA_BENCH_REDIS_URL is not set");
    return;
  }
  UsageSinkConfig c;
  c.type = UsageSinkConfig::Type::RedisStream;
  c.name = "redis";
  c.url = url;
  c.stream = "tahua:bench:usage";
  c.maxlen = 100'000;
  std::string error;
  auto sink = makeUsageSink(c, error);
  if (!sink) {
    state.SkipWithError(error.c_str());
    return;
  }
  deliverThrough(state, *sink);
}
BENCHMARK(BM_SinkDelivery_RedisStream)->Arg(100)->Unit(benchmark::kMicrosecond);

// `rollups` false: the rollups' triggers dropped, as a version-1 ledger wrote.
void sqliteSink(benchmark::State& state, bool rollups) {
  const std::string dir = "/tmp/tahua-ledger-bench-sink-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  UsageSinkConfig c;
  c.type = UsageSinkConfig::Type::Sqlite;
  c.name = "ledger";
  c.path = dir + "/ledger.db";
  {
    std::string error;
    auto sink = makeUsageSink(c, error);
    if (!sink) {
      state.SkipWithError(error.c_str());
      return;
    }
    if (!rollups) {
      sqlite3* db = nullptr;
      sqlite3_open(c.path.c_str(), &db);
      sqlite3_exec(db, "DROP TRIGGER tahua_usage_hourly_insert; DROP TRIGGER tahua_usage_hourly_delete; DROP TRIGGER tahua_usage_hourly_update",
                   nullptr, nullptr, nullptr);
      sqlite3_close(db);
    }
    deliverThrough(state, *sink);
  }
  std::filesystem::remove_all(dir);
}
void BM_SinkDelivery_Sqlite(benchmark::State& state) { sqliteSink(state, true); }
void BM_SinkDelivery_SqliteWithoutRollups(benchmark::State& state) { sqliteSink(state, false); }
BENCHMARK(BM_SinkDelivery_Sqlite)->Arg(100)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SinkDelivery_SqliteWithoutRollups)->Arg(100)->Unit(benchmark::kMicrosecond);

void BM_SinkDelivery_Postgres(benchmark::State& state) {
  const char* dsn = std::getenv("TAHUA_BENCH_PG_DSN");
  if (!dsn || !*dsn) {
    state.SkipWithError("TAHUA_BENCH_PG_DSN is not set");
    return;
  }
  UsageSinkConfig c;
  c.type = UsageSinkConfig::Type::Postgres;
  c.name = "pg";
  c.dsn = dsn;
  c.timeout = Millis(30'000);
  std::string error;
  auto sink = makeUsageSink(c, error);
  if (!sink) {
    state.SkipWithError(error.c_str());
    return;
  }
  deliverThrough(state, *sink);
}
BENCHMARK(BM_SinkDelivery_Postgres)->Arg(100)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
