// The configuration snapshot. Built once by the loader, validated, then shared
// read-only (std::shared_ptr<const Config>) by every worker; a request keeps the
// snapshot it started with alive for its whole life.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/plugin_config.h"
#include "config/prompt_config.h"
#include "config/telemetry_config.h"
#include "core/duration.h"

namespace tahua {

struct ServerTlsConfig {
  std::string cert_file;
  std::string key_file;
};

struct ListenerConfig {
  std::string address = "127.0.0.1";
  std::uint16_t port = 8080;
  std::optional<ServerTlsConfig> tls;
};

// Uploads (multipart/form-data bodies: audio, image edits, files): spooled to an unnamed
// temporary file as they arrive, never held in memory, and sent on from there.
struct UploadConfig {
  std::string spool_dir;            // empty: $TMPDIR, else /tmp
  Millis timeout{600'000};          // to read one upload's body
  std::size_t max_text_bytes = 64 * 1024;  // the form's text fields together
  // Per path (the model, and so the route, is only known from the body): paths not
  // listed take `default_max_bytes`.
  std::uint64_t default_max_bytes = 100ull << 20;
  std::vector<std::pair<std::string, std::uint64_t>> max_bytes{{"/v1/files", 512ull << 20}};
  std::uint64_t limitFor(std::string_view path) const {
    for (const auto& [p, n] : max_bytes)
      if (p == path) return n;
    return default_max_bytes;
  }
};

struct ServerConfig {
  unsigned workers = 0;  // 0 = one per core
  std::size_t max_connections = 65536;  // client connections per process (split over workers)
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_body_bytes = 16 * 1024 * 1024;
  std::size_t max_response_bytes = 64 * 1024 * 1024;
  Millis header_timeout{10'000};
  Millis body_timeout{60'000};
  Millis keepalive_timeout{75'000};
  Millis client_write_timeout{60'000};
  // An answer given before the request's body was read (an upload refused at its
  // headers, a body over its limit) is followed by reading and discarding what the
  // client still sends, so its stack sees the answer and not a reset (nginx's lingering
  // close): for at most lingering_time in all, lingering_timeout per read, and
  // lingering_max_bytes.
  Millis lingering_time{30'000};
  Millis lingering_timeout{5'000};
  std::uint64_t lingering_max_bytes = 1ull << 30;
  Millis drain_timeout{30'000};
  Millis drain_accept_grace{0};  // after SIGTERM keep accepting this long (readyz already 503)
  Millis stream_heartbeat{15'000};  // SSE comment on a stream idle this long; 0 = off
  // A stream's bytes read from upstream but not yet taken by a slow client; past this
  // the stream ends with a stream_buffer_overflow event and the upstream is cancelled.
  std::size_t stream_buffer_bytes = 256 * 1024;
  // The longest event (and so the longest line) an upstream stream may send; past it the
  // stream ends with upstream_event_too_large (the upstream's fault, not the client's).
  std::size_t max_stream_event_bytes = 1024 * 1024;
  std::size_t max_url_bytes = 8 * 1024;  // request target; over it: 414
  std::size_t max_json_depth = 128;      // nesting of a request body; deeper: 400
  bool deployment_header = false;  // X-Tahua-Deployment / X-Tahua-Version on answers
  bool tenant_metrics = false;     // per-tenant series in /metrics (bounded: 1,000 tenants)
  // server.readiness.require_models: /readyz is 503 unless each of these models has a
  // deployment this worker would pick (its provider usable, not ejected, its breaker not
  // open). Empty by default: an upstream outage must not take every replica out at once.
  std::vector<std::string> ready_models;
  UploadConfig uploads;
  // Realtime sessions (WebSockets): closed after this long without a frame either way,
  // or this long in all; one frame (a message) at most this large.
  Millis realtime_idle_timeout{600'000};
  Millis realtime_max_duration{3'600'000};
  std::size_t realtime_max_frame_bytes = 16 * 1024 * 1024;
};

// Concurrency caps for the whole gateway (0 = none); routes may have their own. Over a
// cap a request is refused with 429, or waits up to queue_timeout for a slot (in line
// with at most max_queue others per cap). Per tenant/key caps come with tenants.
struct LimitsConfig {
  std::size_t max_concurrent_requests = 0;
  std::size_t max_concurrent_streams = 0;
  Millis queue_timeout{0};      // 0 = refuse at once
  std::size_t max_queue = 1000;  // waiters per cap; beyond it: 429 at once
};

// The admin API (/admin/v1/...): its own listener, never the public one, and a bearer
// token. Disabled unless both are configured.
// A token that manages one tenant's keys through the admin API (and nothing else).
struct TenantAdminToken {
  std::string name;  // who acted, in the audit trail
  std::string tenant;
  std::array<unsigned char, 32> sha256{};  // only the hash is configured
};

struct AdminConfig {
  bool enabled = false;
  ListenerConfig listener;
  std::string token;      // secret
  std::string token_env;  // where it came from, for messages
  std::vector<TenantAdminToken> tenant_tokens;
};

// Where shared state lives. In process (the default; one replica): counters in memory,
// and what cannot be rebuilt (admin-created tenants and keys, quota consumption) in
// `journal`, a file read back at start.
//
// Redis (type: redis; many replicas): every replica shares the counters and records.
// When Redis does not answer within `command_timeout`, each replica limits on its own
// with the shared limits divided by the replicas seen alive (heartbeats), until it is
// back.
struct RedisStoreConfig {
  std::string url = "redis://127.0.0.1:6379";  // redis://[[user]:password@]host[:port][/db]
  // username, password_env: the password from the environment instead of the url (the
  // url then has none); used for every node of a cluster and the master Sentinel names.
  RedisCredentials auth;
  Millis command_timeout{200};
  Millis heartbeat{2'000};   // a replica announces itself this often ...
  Millis replica_ttl{6'000};  // ... and counts as alive this long after
  Millis resync{30'000};      // full reload of the records (besides change notifications)
  Millis sweep{60'000};       // one replica removes expired registrations and stale node reports this often
  // Refuse to start unless the server persists (AOF or RDB) and never evicts (the
  // records and quotas cannot be rebuilt). Off only for a throwaway Redis.
  bool require_persistence = true;
  // Sentinel: the master is the one these sentinels name `sentinel_master` (the url's
  // host and port are then not used; its password and database are).
  std::vector<std::string> sentinels;  // host:port
  std::string sentinel_master;
  RedisCredentials sentinel_auth;  // the sentinels' own (Sentinel's requirepass / ACL user)
  // Redis Cluster: these nodes (host:port) are asked for the slot map; the url's
  // password and user are used for every node, its host and port are not.
  std::vector<std::string> cluster_nodes;
};

// The Kubernetes API (config `kubernetes`): tahua.dev/v1 resources listed and watched
// from it (`resources`), and the Deployments self-healing's `scale` action patches. The
// loader fills the in-cluster defaults (the service account's files, the
// KUBERNETES_SERVICE_HOST/PORT variables), so every field here is concrete.
struct KubernetesConfig {
  bool enabled = false;          // the section is present
  bool resources = false;        // list and watch the resource kinds
  std::string api_server;        // https://host:port
  std::string namespace_;        // where the resources and the scaled Deployments are
  std::string token_file;        // read again for every call: projected tokens rotate ("": none)
  std::string ca_file;           // the API server's CA ("": the system's)
  Millis timeout{10'000};        // a list, a get, a patch
  Millis watch_timeout{300'000};  // a watch's timeoutSeconds; then watched again from its resourceVersion
  std::string unresolved;        // a pod default that is missing here (not in a pod): the gateway refuses to start
  bool operator==(const KubernetesConfig&) const = default;
};

// Several regions (config `region`, docs/regions.md): this fleet is region `name` with
// its own Redis (store.redis.url); one replica of it pushes, every `interval`, the
// tenants, keys and resources that are newer here (last writer wins by a hybrid logical
// clock) and this region's quota use to each peer's Redis. Requests never wait on a peer.
struct RegionPeerConfig {
  std::string name;
  std::string url;  // redis://... of the peer region's store
  RedisCredentials auth;  // username, password_env for it
  bool operator==(const RegionPeerConfig&) const = default;
};
struct RegionConfig {
  std::string name;  // empty: one region (the section is absent)
  std::vector<RegionPeerConfig> peers;
  Millis interval{500};
  Millis timeout{1'000};  // connect and each command to a peer
  bool operator==(const RegionConfig&) const = default;
};

// Where DNS discovery asks (deployments' `dns`): resolvers as host:port ("[::1]:53");
// none: the system's (/etc/resolv.conf).
struct DiscoveryConfig {
  std::vector<std::string> resolvers;
  Millis timeout{2'000};  // per query try (two tries)
};

// The filter in front of on-demand lookups of a shared store (store/id_filter.h).
struct LookupFilterConfig {
  bool enabled = true;
  std::uint64_t expected_ids = 1'000'000;  // sizes the Bloom filter (1 M at 1%: 1.2 MB)
  double false_positive_rate = 0.01;
  Millis negative_ttl{60'000};             // how long a miss is remembered (0: not at all)
};

struct StoreConfig {
  enum class Type { Memory, Redis };
  Type type = Type::Memory;
  LookupFilterConfig lookups;   // redis
  std::string journal;          // memory: empty = nothing survives a restart (warned about)
  Millis flush_interval{1'000};  // memory: how often quota consumption is appended to the journal
  RedisStoreConfig redis;
};

struct ProviderKind;  // config/provider_kind.h
namespace guardrails {
class RuleSet;  // guardrails/rule_set.h
}

// Upstream timeouts. Defaults here, then the top-level `timeouts` section, then the
// provider's `timeouts`, then a matching route's `timeouts` (field by field).
struct ProviderTimeouts {
  Millis connect{5'000};
  Millis first_byte{120'000};  // request sent → response head
  Millis idle{60'000};         // between two reads of the body (streams: between chunks)
  Millis total{600'000};       // the whole attempt
};

// Timeouts a route sets; unset fields keep the provider's.
struct TimeoutOverrides {
  std::optional<Millis> connect, first_byte, idle, total;
  bool any() const { return connect || first_byte || idle || total; }
  ProviderTimeouts apply(ProviderTimeouts t) const {
    if (connect) t.connect = *connect;
    if (first_byte) t.first_byte = *first_byte;
    if (idle) t.idle = *idle;
    if (total) t.total = *total;
    return t;
  }
};

// Retries of one request to the same provider, only while nothing reached the client.
struct RetryPolicy {
  int attempts = 1;                         // total tries; 1 = no retry
  std::vector<int> on_status{429, 502, 503, 504};  // upstream statuses worth another try
  Millis backoff{200};                      // first wait; doubles per try, full jitter
  Millis max_backoff{5'000};                // also the longest Retry-After we wait for
};

// Per-provider circuit breaker (defaults from the seeds' Resilience4j settings for LLM
// upstreams). Each worker keeps its own breaker over the calls it made.
struct CircuitBreakerConfig {
  bool enabled = false;
  int window = 20;                 // the last N calls are judged (count-based window)
  // Time-based window instead: the calls of the last window_duration are judged (at most
  // 10,000 of them are kept). 0 = count-based.
  Millis window_duration{0};
  int min_calls = 10;              // no verdict on fewer
  int failure_rate = 50;           // % of failed calls that opens the breaker
  Millis slow_call{30'000};        // time to first byte counted as slow; 0 = never slow
  int slow_call_rate = 80;         // % of slow calls that opens the breaker
  Millis open_for{60'000};         // then half-open
  int half_open_probes = 3;        // calls let through half-open; all must succeed
};

struct MockProviderConfig {
  int completion_tokens = 16;
  Millis chunk_delay{0};
  int embedding_dimensions = 8;
};

// Bedrock signs every request with AWS SigV4 instead of sending an API key.
struct AwsConfig {
  std::string region;
  std::string access_key_id;      // secret-ish: never logged
  std::string secret_access_key;  // secret: never logged, never sent
  std::string session_token;      // optional (temporary credentials)
};

struct ProviderConfig {
  std::string name;
  std::string type;                    // the type's name, as in the config ("openai", "bedrock", ...)
  const ProviderKind* kind = nullptr;  // its entry in the vendor registry (config/provider_kind.h)
  std::string base_url;
  // Parsed from base_url.
  bool https = false;
  std::string host;
  std::uint16_t port = 0;
  std::string base_path;  // without trailing slash, e.g. "/v1"
  // Secret: never logged, never sent to clients.
  std::string api_key;
  std::string api_key_env;  // name of the env var it came from, for messages
  bool usable = true;       // false when api_key_env names an unset variable
  std::vector<std::pair<std::string, std::string>> headers;
  ProviderTimeouts timeouts;
  RetryPolicy retry;
  CircuitBreakerConfig circuit_breaker;
  bool tls_verify = true;
  std::string ca_file;
  std::size_t pool_max_idle = 64;
  Millis pool_idle_timeout{60'000};
  MockProviderConfig mock;
  // Vendor specifics (see README "Providers").
  std::string anthropic_version = "2023-06-01";  // anthropic: the anthropic-version header
  std::int64_t default_max_tokens = 4096;        // anthropic, bedrock: when the client sent none
  std::string api_version;                       // azure-openai: the api-version query parameter
  bool stream_usage = true;  // openai-format streams: ask for usage upstream, hide it if the client did not
  AwsConfig aws;             // bedrock
};

// USD per million tokens; a model without prices has no cost.
struct Pricing {
  bool set = false;
  double input = 0;         // uncached prompt tokens
  double output = 0;        // completion tokens
  double cached_input = 0;  // prompt tokens read from the provider's cache (defaults to `input`)
  double per_image = 0;     // USD per image made (/v1/images/generations), besides any tokens
  double per_audio_second = 0;  // USD per second of audio transcribed or translated
  double per_character = 0;     // USD per character of text spoken (/v1/audio/speech)
  double batch_input = -1;      // USD per million tokens in a batch (-1: `input`)
  double batch_output = -1;     // USD per million tokens in a batch (-1: `output`)
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// A declarative route: requests that match go to `target` (a model, i.e. a group of
// deployments). Checked in config order; the first match wins. A client that names a
// configured model gets that model unless a matching route says `override: true`.
struct RouteConfig {
  std::string name;
  // Matchers (all given ones must match).
  std::vector<std::string> models;       // exact client model names
  std::vector<std::string> model_globs;  // shell patterns: gpt-4*, claude-?-opus
  std::string path;                      // exact request path; empty = any
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case name, exact value ("*": present)
  std::vector<std::pair<std::string, std::string>> query;    // name, exact value
  std::vector<std::string> tenants;  // the caller's tenant is one of these (auth on)
  std::vector<std::string> keys;     // the caller's key (by name) is one of these
  // Request features (cost-aware routing); -1 / unset = any.
  std::int64_t min_prompt_tokens = -1;
  std::int64_t max_prompt_tokens = -1;
  int has_tools = -1;                    // 0 / 1
  int from_minute = -1, to_minute = -1;  // UTC time of day [from, to); may wrap midnight
  std::string target;
  std::size_t target_index = 0;
  bool override_model = false;
  // Concurrency caps of the requests this route chose (0 = none); see LimitsConfig.
  std::size_t max_concurrent_requests = 0;
  std::size_t max_concurrent_streams = 0;
  TimeoutOverrides timeouts;  // over the chosen provider's, for requests this route chose
  bool semantic_cache = true;  // false: requests this route chose skip the semantic lookup
  // A RateLimitPolicy that applies to the requests this route chose (added to the
  // policy's match.route when the config is loaded).
  std::string policy_ref;
  bool needsFeatures() const { return min_prompt_tokens >= 0 || max_prompt_tokens >= 0 || has_tools >= 0; }
};

// One place a model is served: a provider plus the name the upstream knows it by, with
// the metadata routing decides on (see README "Routing and canary releases").
// A deployment whose endpoints are a DNS name's records (discovery/dns_discovery.h):
// each address becomes an endpoint of its own, re-resolved after the records' TTL.
struct DnsDiscoveryConfig {
  std::string name;  // e.g. vllm.default.svc.cluster.local (a headless Service)
  enum class Type { A, AAAA, SRV };
  Type type = Type::A;
  std::uint16_t port = 0;      // A/AAAA: the endpoints' port (0: the provider base_url's)
  Millis min_ttl{5'000};       // the records' TTL, bounded (nginx's resolver valid=)
  Millis max_ttl{60'000};
  Millis slow_start{0};        // a new endpoint's weight ramps up from 10 % over this
  bool keep_on_empty = true;   // an empty answer keeps the endpoints there are (false: none)
};

struct DeploymentConfig {
  // What every routing decision reads comes first, so it shares one cache line.
  std::uint32_t weight = 100;  // relative share under weighted policies; 0 = only when pinned
  bool canary = false;         // version == its model's canary.version (precomputed)
  float ramp = 1;              // a discovered endpoint in its slow start: 0.1 .. 1 (its weight is ramped too)
  std::size_t index = 0;       // position among all deployments of the config (state slots)
  std::size_t provider_index = 0;
  std::string id;              // unique within its model; default: the provider's name
  std::string provider;
  std::string upstream_model;  // Azure: deployment name; Bedrock: model id
  std::string version = "stable";
  std::vector<std::pair<std::string, std::string>> labels;  // region, zone, anything
  std::string node;            // inference node id its status reports use; default: id
  // Endpoints from DNS: the deployment stands for all of them (the config's view); the
  // config in force has one deployment per endpoint instead (source "dns").
  std::shared_ptr<const DnsDiscoveryConfig> dns;
  std::string address;           // an endpoint's: connect to this ip:port; the provider's host stays Host and TLS name
  std::string source = "config";  // config | dns
};

struct Config;
// Gives every deployment of every model, then of the files and mcp targets, its state slot
// (DeploymentConfig::index) and sets deployment_count. After anything that changes
// the deployments (the loader, discovery).
void numberDeployments(Config& config);

struct ModelConfig;
// Sets each deployment's `canary` flag from the model's canary section and builds the
// pick tables below (the loader does this; code building configs by hand must too).
void markCanaryDeployments(ModelConfig& model);

// The deployments of one version subset that have weight, with cumulative weights, so
// a healthy group is picked from in O(log n) (see Balancer::pick).
struct PickTable {
  std::vector<std::uint32_t> index;   // into ModelConfig::deployments
  std::vector<std::uint64_t> cumulative;
};

enum class BalancePolicy { WeightedRandom, RoundRobin, LeastOutstanding, Latency, GpuAware };

std::string_view balancePolicyName(BalancePolicy p);

// Splits a model's traffic between its stable and canary versions.
struct CanaryConfig {
  bool enabled = false;
  std::string version = "canary";  // deployments with this version form the canary subset
  double percent = 0;              // share of requests (0..100) sent to the canary
  // The key a request is hashed on so a user stays on one side: a header (e.g.
  // x-user-id); empty = the client's API key. No key: random per request.
  std::string sticky_header;
  // sticky_by: tenant hashes (and matches `allow` against) the caller's tenant name.
  bool sticky_by_tenant = false;
  std::vector<std::string> allow;  // key values (user ids) always sent to the canary
};

// Passive outlier ejection from observed failures (5xx, connect errors, timeouts).
struct OutlierConfig {
  int consecutive_failures = 5;  // 0 = off
  // Error rate over a time window: at least `min_requests` calls in `interval`, of which
  // `error_rate` % or more failed. error_rate 0 = off.
  int error_rate = 0;
  Millis interval{60'000};
  int min_requests = 10;
  Millis eject_for{30'000};      // first ejection; doubles for each repeat, up to max
  Millis max_eject_for{300'000};
};

// GPU-aware scoring of reported node status (defaults from the seeds): load score =
// util*gpu_util + mem*gpu_memory + conns/connections_scale*connections +
// queued/queue_scale*queue, times degraded_factor when DEGRADED; lower is better.
struct GpuScoreConfig {
  double gpu_util = 40;
  double gpu_memory = 30;
  double connections = 20;
  double connections_scale = 10;
  double queue = 10;
  double queue_scale = 5;
  double degraded_factor = 1.5;
  double eject_score = 90;  // a node scoring above this gets no traffic (unless all do)
  // Traffic over the best nodes by weighted random: rank k gets split[k] (relative; the
  // seed's 60/30/10), over the first `top` ranks (default: every share of the split).
  std::vector<double> split{60, 30, 10};
  int top = 3;
  Millis status_ttl{15'000};  // a report older than this is ignored
};

// Which answers of a model the response cache keeps (`cache:` and a model's `cache:`).
struct CachePolicy {
  bool enabled = false;
  Millis ttl{3'600'000};
  std::size_t max_entry_bytes = 1 << 20;  // a larger answer is not kept
  bool all_requests = false;              // false: only requests with `temperature: 0`
  // How long after its ttl an entry may still answer when every upstream failed (as a
  // marked fallback answer); 0: never.
  Millis stale_if_error{0};
  // The semantic layer: a request whose last user message is close enough (cosine
  // similarity of embeddings from `embedding_model`, one of the gateway's own `openai`-type
  // models) to a kept one's, all else equal, gets its answer.
  bool semantic = false;
  std::string embedding_model;
  double threshold = 0.95;
};

// The exact response cache (src/cache/, filter src/filters/cache/).
struct CacheConfig {
  CachePolicy defaults;                   // for models without their own `cache`
  std::size_t max_bytes = 256u << 20;     // the in-process layer, per replica
  bool per_key = false;                   // entries per API key rather than per tenant
  bool key_user = false;                  // the request's `user` is part of the key
  bool hit_tokens = false;                // a hit counts its tokens against token limits (else zero)
  std::string redis_url;                  // a shared layer (a Redis of its own, evicting)
  Millis redis_timeout{200};              // a Redis lookup slower than this is a miss
  Millis local_ttl{60'000};               // with Redis: the in-process copy lives at most this long
  // The semantic layer's vectors (in process, per replica): at most this many in all and
  // per tenant (a tenant beyond its share replaces its own oldest, never another's).
  std::size_t semantic_max_entries = 20'000;
  std::size_t semantic_max_entries_per_tenant = 2'000;
  Millis embedding_timeout{2'000};       // a slower embedding is a miss (the request goes on)
};

struct ModelConfig {
  std::string name;
  CachePolicy cache;  // the model's own `cache`, else cache's defaults
  // Share (0..100) of this model's traffic sent straight to its first fallback. Never
  // from the file: set by a self-healing rule (shift_to_fallback) while it is active.
  double shift_percent = 0;
  std::vector<DeploymentConfig> deployments;  // at least one
  BalancePolicy balancing = BalancePolicy::WeightedRandom;
  CanaryConfig canary;
  OutlierConfig outlier;
  GpuScoreConfig gpu;
  Pricing pricing;
  PickTable stable_table;  // every deployment when there is no canary section
  PickTable canary_table;
  // Failover: when every deployment of this model failed (or is open/ejected) before
  // anything reached the client, these models are tried in order.
  std::vector<std::string> fallbacks;
  std::vector<std::size_t> fallback_indices;  // into Config::models
  std::vector<int> fallback_on{429, 500, 502, 503, 504};  // upstream statuses that fail over
  // When everything failed: answer with this, marked (X-Tahua-Fallback, is_fallback).
  bool fallback_response = false;
  std::string fallback_message;
  int fallback_status = 503;
};


// Self-healing: declarative rules over live metrics, evaluated every `interval`; each
// action (and its undoing) is an audit record (log, admin view, metrics, audit_log file).
struct HealingRuleConfig {
  // gpu_memory, gpu_util (percent) and queued_requests: the largest over the live status
  // reports of the watched deployments' nodes, as they stand (not a window's count).
  enum class Metric { TtftP99, ErrorRate, GpuMemory, GpuUtil, QueuedRequests };
  enum class Action { ShiftToFallback, Eject, Scale };
  // scale: the Kubernetes Deployment (in kubernetes.namespace) serving the model is
  // patched to `replicas` (within min..max) when the rule fires, and back to what it had
  // when it is undone; two patches of it by this rule are `cooldown` apart at least.
  struct Scale {
    std::string deployment;
    int replicas = 0;
    int min = 1;
    int max = 10;
    Millis cooldown{300'000};
    bool operator==(const Scale&) const = default;
  };
  std::string name;
  std::string model;
  std::string deployment;  // eject: a deployment id or "*" (each one); shift, scale: empty (the model)
  Metric metric = Metric::ErrorRate;
  double above = 0;        // ttft_p99: milliseconds; error_rate, gpu_*: percent; queued_requests: a count
  Millis for_{60'000};     // the condition holds this long (every interval of it) → act
  int min_requests = 10;   // an interval with fewer requests has no verdict
  Action action = Action::Eject;
  double percent = 100;    // shift_to_fallback: share of the model's traffic moved
  Millis restore_after{600'000};  // healthy (or idle) this long → undo
  Scale scale;
  // A metric from the nodes' status reports rather than the gateway's own counters.
  bool nodeMetric() const { return metric == Metric::GpuMemory || metric == Metric::GpuUtil || metric == Metric::QueuedRequests; }
};

struct HealingConfig {
  Millis interval{10'000};
  std::string audit_log;   // JSON lines appended per action; empty = log and admin view only
  std::vector<HealingRuleConfig> rules;
};

std::string_view healingMetricName(HealingRuleConfig::Metric m);
std::string_view healingActionName(HealingRuleConfig::Action a);

// Rate limits and quotas of one scope (a tenant, a key, a tenant x model, a model over
// all tenants); 0 = no limit of that kind. See README "Tenants, keys and limits".
struct LimitSet {
  std::int64_t requests_per_minute = 0;  // sliding window of 60 s
  std::int64_t tokens_per_minute = 0;    // token bucket: holds this many, refills as many per minute
  std::int64_t tokens_per_day = 0;       // quotas over the UTC calendar day / month
  std::int64_t tokens_per_month = 0;
  double usd_per_day = 0;                // budgets, priced from the models' `pricing`
  double usd_per_month = 0;
  // Concurrency caps (bulkheads) of the scope: in flight at once, over every replica's
  // workers of this process (0 = none). Over it: 429 concurrency_limit_exceeded.
  std::int64_t max_concurrent_requests = 0;
  std::int64_t max_concurrent_streams = 0;
  // Any rate limit, quota or budget (the rate-limit filter's); caps are the bulkhead's.
  bool any() const {
    return requests_per_minute || tokens_per_minute || tokens_per_day || tokens_per_month || usd_per_day > 0 ||
           usd_per_month > 0;
  }
  bool anyCap() const { return max_concurrent_requests || max_concurrent_streams; }
};

struct TenantConfig {
  std::string name;
  std::vector<std::string> models;  // the models its keys may use; empty = all
  LimitSet limits;                  // all of the tenant's keys together
  std::vector<std::pair<std::string, LimitSet>> model_limits;  // tenant x model
  bool from_store = false;  // created through the admin API (not the config file)
  std::int64_t created_at = 0;
  std::string created_by;
};

// A gateway API key. Only its SHA-256 is kept (config and store alike); `prefix` is the
// key's first characters, for people to recognise it in lists and logs.
struct ApiKeyConfig {
  std::string name;  // unique among keys
  std::string tenant;
  std::array<unsigned char, 32> sha256{};
  std::string prefix;
  std::vector<std::string> models;  // allowed models (within the tenant's); empty = the tenant's
  std::int64_t expires_at = 0;      // unix seconds; 0 = never
  LimitSet limits;
  std::vector<std::pair<std::string, std::string>> metadata;
  bool from_store = false;  // created through the admin API (not the config file)
  std::int64_t created_at = 0;
  std::string created_by;
};

// One link of an authentication chain (see AuthLink): the built-in key check, a fixed
// identity for requests that reach it (internal paths), or a plugin's on_auth.
struct AuthLinkConfig {
  enum class Type { ApiKey, Anonymous, Plugin };
  Type type = Type::ApiKey;
  std::string tenant;  // anonymous: the tenant its requests count against
  std::string plugin;  // plugin: its id
};

// A chain of links for the requests it matches (first matching chain wins).
struct AuthChainConfig {
  std::string name;
  std::string path_prefix;  // empty = any
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case name, exact value ("*": present)
  std::vector<AuthLinkConfig> links;
};

struct AuthConfig {
  bool enabled = false;  // on when tenants or keys are declared, unless auth.enabled says otherwise
  std::vector<AuthChainConfig> chains;  // none matching: the built-in key check alone
};

// A rate-limit policy (seed S0 4.2): limits for the requests it matches, with rules per
// client type (the value of `client_header`) and a rollout of a rule to a share of its
// requests (by hash, so a caller stays on one side). Counted per key, per tenant or
// over everyone (`per`).
struct RateLimitRule {
  std::string client_type;
  LimitSet limits;
  double rollout_percent = 100;  // the rule applies to this share; the rest get the default
  std::string rollout_header;    // hashed to pick the share; empty = the caller's key (or tenant)
};

struct RateLimitPolicyConfig {
  std::string name;
  std::vector<std::string> models, tenants, keys;  // match (all given lists must hold the request's); empty = any
  std::vector<std::string> routes;  // match.route: the route that chose the model (and routes naming it in policyRef)
  std::string client_header = "x-client-type";
  enum class Per { Key, Tenant, All };
  Per per = Per::Key;
  LimitSet limits;  // the default, for requests no rule takes
  std::vector<RateLimitRule> rules;
  // A stream whose output passes what this policy's token limits still allowed at
  // admission is ended with an error event (else it runs on and the limits go into debt).
  bool end_streams_over_budget = false;
};

// Idempotency-Key (README "Idempotency"): a retry with the same key (and the same
// request) within `ttl` gets the stored answer instead of a second upstream call.
struct IdempotencyConfig {
  bool enabled = true;
  Millis ttl{3'600'000};        // a completed answer is kept this long
  Millis lock_ttl{120'000};     // an answer in progress holds its key this long, renewed while it runs
  std::size_t max_body_bytes = 4 * 1024 * 1024;  // a larger answer is not kept (its retries get 409)
};

// Stored responses (OpenAI's Responses API state, kept by the gateway for the answers it
// translates): previous_response_id and item_reference for every provider, and
// GET/DELETE /v1/responses/{id}. Kept in the state store, per tenant (or per key).
struct ResponsesConfig {
  bool store = true;               // false: nothing is kept, whatever a request's `store` says
  Millis ttl{30LL * 86'400'000};   // a stored response lives this long
  std::size_t max_bytes_per_tenant = 64u << 20;  // over it, the tenant's oldest go first
  bool per_key = false;            // scope by API key rather than by tenant
  std::size_t max_turns = 256;     // previous_response_id chains longer than this are refused
};

// A guardrail policy (`guardrails.policies`, GuardrailPolicy resources): content rules
// for the requests it is attached to (README "Guardrails"). Its rules are compiled once,
// when the config is loaded, and shared read-only by every worker.
struct GuardrailPolicyConfig {
  std::string name;
  // Attached to: requests whose model (as asked or as routed), route, tenant and key are
  // in every list given; no list = every request.
  std::vector<std::string> models, routes, tenants, keys;
  std::shared_ptr<const guardrails::RuleSet> rules;
  std::string fingerprint;  // a digest of its definition: a kept answer names the policies that shaped it
};

struct GuardrailsConfig {
  std::vector<GuardrailPolicyConfig> policies;  // guardrails.policies, then GuardrailPolicy resources
};

// Limits over all tenants, and how token limits estimate a request before it runs.
struct RateLimitConfig {
  // Completion tokens reserved for a request that sets no max_tokens (and that a token
  // limit applies to); calibrated to the real count afterwards.
  std::int64_t default_max_tokens = 1024;
  // The same for the tenant, key, tenant x model and model token limits.
  bool end_streams_over_budget = false;
  std::vector<std::pair<std::string, LimitSet>> models;  // per model, every caller together
  std::vector<RateLimitPolicyConfig> policies;           // rate_limits.policies, then RateLimitPolicy resources
};

// /v1/files and /v1/batches name no model: `provider` serves them (`tenants` may give a
// tenant its own), and the gateway remembers which tenant owns each file and batch for
// `ttl` (docs/files-and-batches.md). A batch is metered by a poller, every
// `poll_interval`, when it ends.
struct FilesConfig {
  std::string provider;  // empty: the endpoints answer 404 files_not_configured
  std::vector<std::pair<std::string, std::string>> tenants;  // tenant -> provider
  Millis ttl{30LL * 24 * 3600 * 1000};
  Millis poll_interval{60'000};
  // Built by the loader: one routing target per provider named above, a model of its
  // own (named "files:<provider>") that is not in `models` and never routable by name.
  std::vector<ModelConfig> targets;
  const ModelConfig* targetOf(std::string_view provider_name) const {
    for (const auto& t : targets)
      if (t.deployments.front().provider == provider_name) return &t;
    return nullptr;
  }
  const ModelConfig* targetFor(std::string_view tenant) const {
    for (const auto& [name, provider] : tenants)
      if (name == tenant) return targetOf(provider);
    return provider.empty() ? nullptr : targetOf(provider);
  }
};

// The MCP gateway (README "MCP gateway", docs/mcp-gateway.md): the providers of type
// `mcp` are upstream MCP servers (Streamable HTTP), fronted together at /mcp with their
// tools, prompts and resources merged and named "<server>__<name>".
struct McpAccessRule {
  // Whom the rule applies to: callers of these tenants or keys (by name); neither: everyone.
  std::vector<std::string> tenants, keys;
  // Shell globs over the namespaced names ("github__create_*"): a tool or prompt is
  // visible when a rule that applies allows it and none that applies denies it.
  std::vector<std::string> allow, deny;
};

struct McpConfig {
  // Rules for who sees and calls what; none at all: every caller sees everything.
  std::vector<McpAccessRule> access;
  // How long a session (the gateway's and its upstream ones, in the state store) lives
  // from its initialize.
  Millis session_ttl{24LL * 3600 * 1000};
  // The largest answer relayed from a server (a tool's result, a stream's events).
  std::size_t max_response_bytes = 4u << 20;
  // Each fan-out call to a server (initialize, tools/list, ...) answers within this.
  Millis call_timeout{10'000};
  // The access log and usage record of a tools/call carry its arguments (off: never).
  bool audit_arguments = false;
  // Tool-definition pinning: a tool whose description or schemas changed since they were
  // approved is hidden until an admin approves the change (/admin/v1/mcp/tools).
  bool pin_tools = true;
  // Arguments are checked against the tool's inputSchema before the call.
  bool validate_arguments = true;
  // Origins (scheme://host[:port], lower case; "*": any) a request with an Origin header
  // may come from, besides loopback ones (DNS rebinding: a web page's script must not
  // reach MCP servers through a gateway on the same machine). No Origin: not checked.
  std::vector<std::string> allowed_origins;
  // Built by the loader: one routing target per `mcp` provider, a model of its own named
  // "mcp:<server>", not in `models` and never routable by name.
  std::vector<ModelConfig> targets;
  const ModelConfig* targetOf(std::string_view server) const {
    for (const auto& t : targets)
      if (t.deployments.front().provider == server) return &t;
    return nullptr;
  }
};

struct Config {
  std::string source;  // file path, or "<built-in>"
  ServerConfig server;
  std::vector<ListenerConfig> listeners;
  AccessLogConfig access_log;
  TracingConfig tracing;
  UsageConfig usage;
  LimitsConfig limits;
  ProviderTimeouts default_timeouts;  // the top-level `timeouts`: every provider's starting point
  std::vector<ProviderConfig> providers;
  std::vector<ModelConfig> models;
  std::unordered_map<std::string, std::size_t, StringHash, std::equal_to<>> model_index;
  std::size_t deployment_count = 0;  // over all models (and the files and mcp targets: numberDeployments)
  FilesConfig files;
  McpConfig mcp;
  std::vector<RouteConfig> routes;
  // Precompiled lookup: routes naming a model exactly, by name; and the rest (globs or
  // no model matcher). Both lists in config order.
  std::unordered_map<std::string, std::vector<std::uint32_t>, StringHash, std::equal_to<>> routes_by_model;
  std::vector<std::uint32_t> routes_any_model;
  AdminConfig admin;
  HealingConfig healing;
  AuthConfig auth;
  StoreConfig store;
  DiscoveryConfig discovery;
  KubernetesConfig kubernetes;
  RegionConfig region;
  IdempotencyConfig idempotency;
  ResponsesConfig responses;
  CacheConfig cache;
  GuardrailsConfig guardrails;
  std::vector<TenantConfig> tenants;
  std::vector<ApiKeyConfig> keys;
  RateLimitConfig rate_limits;
  // Lua plugins, in the order they run (`plugins:` and Plugin resources).
  std::vector<PluginConfig> plugins;
  // Prompt templates (`prompts:` and PromptTemplate resources), by id then version.
  std::vector<PromptTemplateConfig> prompts;
  // The template `id` at `version` ("" or "latest": the greatest version), or null.
  const PromptTemplateConfig* findPrompt(std::string_view id, std::string_view version) const;
  std::uint64_t generation = 0;  // set when published: 1, 2, ... (admin API, logs)

  const ModelConfig* findModel(std::string_view name) const {
    auto it = model_index.find(name);
    return it == model_index.end() ? nullptr : &models[it->second];
  }
  // Some model keeps answers in the response cache.
  bool anyModelCached() const {
    for (const auto& m : models)
      if (m.cache.enabled) return true;
    return false;
  }
  bool anyProviderUsable() const {
    for (const auto& p : providers)
      if (p.usable) return true;
    return false;
  }
};

using ConfigPtr = std::shared_ptr<const Config>;

// Why `model` cannot answer the gateway's own embeddings calls ("" : it can): unknown, or
// served by a provider kind whose adapter passes no embeddings through (openai,
// azure-openai and mock do; providers/embedding_call.h makes the calls).
std::string embeddingModelProblem(const Config& cfg, std::string_view model);

struct ConfigLoadResult {
  ConfigPtr config;   // set on success
  std::string error;  // "file:line:col: field.path: message" on failure
  std::vector<std::string> warnings;
};

// A file, or a directory: every *.yaml / *.yml in it (not hidden, in name order, each
// may hold several documents) is merged: plain documents contribute top-level sections
// (each section in one file only), `apiVersion: tahua.dev/v1` resources (ModelRoute,
// RateLimitPolicy, PromptTemplate) are collected. Errors name the file they come from.
// `listeners_optional`: `--listen` gives them (a config without `listeners` is not refused).
ConfigLoadResult loadConfigFile(const std::string& path, bool listeners_optional = false);
// The bytes a config path stands for (a file's, or a directory's yaml files with their
// names), for change detection. False if unreadable.
bool readConfigBytes(const std::string& path, std::string& out);
ConfigLoadResult loadConfigString(std::string_view yaml, std::string_view source_name);

// Resources kept in the state store (put through the admin API, or written straight to
// Redis), applied over the config file's: `id` is "Kind/name", `spec` the resource's
// spec as JSON (or YAML). The file wins: a resource it declares too (same kind and name)
// is skipped with a warning. An invalid one is skipped and reported in `rejected`
// ("id", "error naming it"); the others still apply. ModelRoutes follow the file's
// routes, in id order.
struct StoredResource {
  std::string id;
  std::string spec;
  std::string origin;  // named in messages: "" = "store resource", else e.g. "kubernetes"
};
struct StoredResourcesResult {
  ConfigPtr config;
  std::vector<std::string> warnings;
  std::vector<std::pair<std::string, std::string>> rejected;
};
StoredResourcesResult applyStoredResources(const ConfigPtr& base, const std::vector<StoredResource>& resources);
// Whether the config file declares resource Kind/name (the file's wins over a stored one).
bool declaredInFile(const Config& base, std::string_view kind, std::string_view name);
// The kinds a stored resource may have, and a name's rules (the admin API checks both).
bool storedResourceKind(std::string_view kind);
bool storedResourceName(std::string_view name);

// The built-in default: listens on 127.0.0.1:8080 and serves mock models.
std::string_view defaultConfigYaml();

}  // namespace tahua
