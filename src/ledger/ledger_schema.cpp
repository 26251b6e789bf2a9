#include "ledger/ledger_schema.h"

#include <vector>

#include "ledger/ledger_rollups.h"

namespace tahua::ledger {
namespace {

// Version 1: the records table and the indexes the usage queries need (by tenant, key
// or model over a time range; by time alone for retention).
constexpr std::string_view kPostgresV1[] = {
    R"(CREATE TABLE tahua_usage_records (
  record_id uuid PRIMARY KEY,
  supersedes uuid,
  request_id text NOT NULL,
  ts timestamptz NOT NULL,
  end_ts timestamptz,
  gateway text,
  region text,
  tenant text,
  key text,
  key_prefix text,
  api text,
  method text,
  path text,
  requested_model text,
  model text,
  provider text,
  deployment text,
  version text,
  route_name text,
  stream boolean,
  status integer,
  end_reason text,
  error text,
  replayed boolean,
  prompt_tokens bigint,
  completion_tokens bigint,
  cached_tokens bigint,
  total_tokens bigint,
  images bigint,
  audio_seconds double precision,
  characters bigint,
  usage_source text,
  cost_usd numeric,
  duration_ms double precision,
  ttft_ms double precision,
  bytes_out bigint,
  attempts integer,
  fallback text,
  cache text,
  cache_tokens_saved bigint,
  prompt text,
  guardrails text,
  guardrail_signals text,
  guardrails_unchecked text,
  quality text,
  quality_similarity double precision,
  mcp_method text,
  mcp_tool text,
  mcp_outcome text,
  trace_id text
))",
    "CREATE INDEX tahua_usage_records_ts ON tahua_usage_records (ts)",
    "CREATE INDEX tahua_usage_records_tenant_ts ON tahua_usage_records (tenant, ts)",
    "CREATE INDEX tahua_usage_records_key_ts ON tahua_usage_records (key, ts)",
    "CREATE INDEX tahua_usage_records_model_ts ON tahua_usage_records (model, ts)",
    "CREATE INDEX tahua_usage_records_supersedes ON tahua_usage_records (supersedes) WHERE supersedes IS NOT NULL",
};

// The same in SQLite's types: times as ISO 8601 text (UTC, milliseconds: they sort and
// compare as text), booleans 0/1, and the cost in integer nano-dollars (exact sums).
constexpr std::string_view kSqliteV1[] = {
    R"(CREATE TABLE tahua_usage_records (
  record_id TEXT PRIMARY KEY,
  supersedes TEXT,
  request_id TEXT NOT NULL,
  ts TEXT NOT NULL,
  end_ts TEXT,
  gateway TEXT,
  region TEXT,
  tenant TEXT,
  key TEXT,
  key_prefix TEXT,
  api TEXT,
  method TEXT,
  path TEXT,
  requested_model TEXT,
  model TEXT,
  provider TEXT,
  deployment TEXT,
  version TEXT,
  route_name TEXT,
  stream INTEGER,
  status INTEGER,
  end_reason TEXT,
  error TEXT,
  replayed INTEGER,
  prompt_tokens INTEGER,
  completion_tokens INTEGER,
  cached_tokens INTEGER,
  total_tokens INTEGER,
  images INTEGER,
  audio_seconds REAL,
  characters INTEGER,
  usage_source TEXT,
  cost_nano_usd INTEGER,
  duration_ms REAL,
  ttft_ms REAL,
  bytes_out INTEGER,
  attempts INTEGER,
  fallback TEXT,
  cache TEXT,
  cache_tokens_saved INTEGER,
  prompt TEXT,
  guardrails TEXT,
  guardrail_signals TEXT,
  guardrails_unchecked TEXT,
  quality TEXT,
  quality_similarity REAL,
  mcp_method TEXT,
  mcp_tool TEXT,
  mcp_outcome TEXT,
  trace_id TEXT
))",
    "CREATE INDEX tahua_usage_records_ts ON tahua_usage_records (ts)",
    "CREATE INDEX tahua_usage_records_tenant_ts ON tahua_usage_records (tenant, ts)",
    "CREATE INDEX tahua_usage_records_key_ts ON tahua_usage_records (key, ts)",
    "CREATE INDEX tahua_usage_records_model_ts ON tahua_usage_records (model, ts)",
    "CREATE INDEX tahua_usage_records_supersedes ON tahua_usage_records (supersedes) WHERE supersedes IS NOT NULL",
};

#define TAHUA_LEDGER_COLUMNS(COST)                                                                                      \
  "record_id", "supersedes", "request_id", "ts", "end_ts", "gateway", "region", "tenant", "key", "key_prefix", "api",    \
      "method", "path", "requested_model", "model", "provider", "deployment", "version", "route_name", "stream",        \
      "status", "end_reason", "error", "replayed", "prompt_tokens", "completion_tokens", "cached_tokens",               \
      "total_tokens", "images", "audio_seconds", "characters", "usage_source", COST, "duration_ms", "ttft_ms",          \
      "bytes_out", "attempts", "fallback", "cache", "cache_tokens_saved", "prompt", "guardrails", "guardrail_signals",  \
      "guardrails_unchecked", "quality", "quality_similarity", "mcp_method", "mcp_tool", "mcp_outcome", "trace_id"
constexpr std::string_view kPostgresColumns[] = {TAHUA_LEDGER_COLUMNS("cost_usd")};
constexpr std::string_view kSqliteColumns[] = {TAHUA_LEDGER_COLUMNS("cost_nano_usd")};
#undef TAHUA_LEDGER_COLUMNS

// Version 2: the per-hour rollups beside the rows, their triggers and their backfill
// (generated: ledger_rollups.cpp), made once per process.
struct GeneratedStep {
  std::vector<std::string> text;
  std::vector<std::string_view> views;
  explicit GeneratedStep(Dialect d) : text(rollupMigration(d)), views(text.begin(), text.end()) {}
};

}  // namespace

std::span<const std::string_view> migrationStep(Dialect d, int version) {
  if (version == 1) return d == Dialect::Postgres ? std::span<const std::string_view>(kPostgresV1) : std::span<const std::string_view>(kSqliteV1);
  if (version == 2) {
    static const GeneratedStep pg(Dialect::Postgres), lite(Dialect::Sqlite);
    return d == Dialect::Postgres ? std::span<const std::string_view>(pg.views) : std::span<const std::string_view>(lite.views);
  }
  return {};
}

std::span<const std::string_view> recordColumns(Dialect d) {
  return d == Dialect::Postgres ? std::span<const std::string_view>(kPostgresColumns) : std::span<const std::string_view>(kSqliteColumns);
}

MigrationPlan planMigration(int found, int binary) {
  MigrationPlan p;
  p.from = found;
  p.to = binary;
  if (found > binary) p.action = MigrationPlan::Action::TooNew;
  else if (found < binary) p.action = MigrationPlan::Action::Migrate;
  return p;
}

std::string tooNewError(std::string_view where, int found, int binary) {
  return std::string(where) + ": the ledger's schema is at version " + std::to_string(found) + ", newer than this tahua's (" +
         std::to_string(binary) +
         "); refusing to write to it. Run the newer tahua that migrated it, or point this sink at another database";
}

}  // namespace tahua::ledger
