// The observability sections of the config: traces (`tracing`), usage records for
// billing (`usage`) and the access log (`access_log`), gathered with the other sections
// into config.h's `Config`. The exporters are set up at start: a reload that changes
// where traces or records go logs that it needs a restart and they keep going where
// they went; turning them off, sampling, content capture and the access log's sampling
// apply at once.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/duration.h"
#include "core/redis_url.h"

namespace tahua {

// OpenTelemetry traces, exported over OTLP/HTTP (JSON) in batches from a background
// thread. Off unless an endpoint is set.
struct TracingConfig {
  bool enabled = false;
  std::string endpoint;  // http://host:port/v1/traces
  // OTLP/HTTP's encoding: binary protobuf (what collectors and SDKs default to) or JSON.
  enum class Protocol { Protobuf, Json };
  Protocol protocol = Protocol::Protobuf;
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every export (an API key)
  std::string service_name = "tahua";
  // Share of new traces sampled (the sampled flag sent upstream); a parent's flag wins.
  // Every errored request is exported whatever the decision.
  double sample_ratio = 1.0;
  bool capture_content = false;  // prompt and completion text as span attributes (bounded)
  std::size_t max_queue_spans = 16384;  // spans waiting for export; past it they are dropped (counted)
  std::size_t max_batch_spans = 512;    // spans per export request
  Millis flush_interval{1'000};
  Millis timeout{5'000};  // one export request
};

// One place usage records go.
struct UsageSinkConfig {
  enum class Type { File, RedisStream, Webhook, Sqlite, Postgres };
  Type type = Type::File;
  std::string name;  // unique; names the sink in metrics and its spill file
  // file: JSON lines, rotated past rotate_bytes or rotate_interval (0: never), the
  // newest `keep` rotated files kept (path.1 newest).
  std::string path;
  std::uint64_t rotate_bytes = 256ull << 20;
  Millis rotate_interval{0};
  unsigned keep = 10;
  // redis_stream: XADD stream MAXLEN ~ maxlen * record <json> record_id <id>. The url
  // defaults to the state store's Redis, and then so do the credentials (unless the sink
  // has its own: another ACL user on the same server).
  std::string url;
  RedisCredentials auth;  // username, password_env (redis_stream)
  std::string stream = "tahua:usage";
  std::uint64_t maxlen = 1'000'000;
  // webhook: POST url with a JSON array of records, at most `batch` per request; a 2xx
  // answer is delivery. (url above; http:// or https://.)
  std::vector<std::pair<std::string, std::string>> headers;
  std::size_t batch = 500;
  Millis timeout{5'000};
  // sqlite: `path` is the database file (WAL); max_bytes its size at most (0: the disk's),
  // past it writes fail as on a full disk and records spill.
  std::uint64_t max_bytes = 0;
  // postgres: a libpq connection string or URI, from `dsn` (which holds no password) or
  // from the variable `dsn_env` names; the password from the variable `password_env`
  // names. Read at load: `dsn` and `password` are secret, never logged. `batch`: records
  // per INSERT.
  std::string dsn;
  std::string dsn_env;
  std::string password;
  // sqlite and postgres: rows older than this are deleted in the background; 0: kept.
  Millis retention{0};
  // sqlite and postgres: the longest from..to the ledger's admin queries accept.
  Millis query_max_range{366ll * 24 * 3'600'000};
};

// Usage records: one per finished request (401s excepted), exported asynchronously.
// Delivery is at least once to every sink; a sink that fails gets the records in its
// spill file under spill_dir, replayed when it answers again; past spill_max_bytes
// (per sink) records are dropped, counted and logged.
struct UsageConfig {
  bool enabled = false;
  std::string spill_dir;  // required when enabled
  std::uint64_t spill_max_bytes = 1ull << 30;
  std::size_t max_queue_records = 65536;  // handed over by workers, not yet written; past it dropped (counted)
  Millis retry_backoff{1'000};            // first retry of a failed sink; doubles to 30 s
  std::string gateway_id;                 // the replica's name in records (default: host name)
  std::vector<UsageSinkConfig> sinks;
};

struct AccessLogConfig {
  bool enabled = true;
  std::string path = "-";
  // Share of successful (< 400) lines written; errors are always written.
  double sample_success = 1.0;
  // Bytes of lines waiting for the writer thread; past it lines are dropped (counted),
  // never waited for.
  std::size_t max_pending_bytes = 8u << 20;
};

}  // namespace tahua
