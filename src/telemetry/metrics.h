// Per-worker metrics. Each worker owns one WorkerMetrics and is the only writer, so
// counters are plain integers: no atomics or locks on the request path. A scrape asks
// every worker (on its own thread) for a copy and merges the copies.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace tahua {

// Upper bounds: LLM latencies span milliseconds (cache, errors) to minutes.
inline constexpr std::array<double, 16> kSecondsBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                          2.5,   5,    10,    20,   30,  60,   120, 300};
// The gap between a stream's events (inter-token latency), and a store's decision time.
inline constexpr std::array<double, 12> kFineBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                       0.01,   0.025,   0.05,   0.1,   0.25,   1};
// Tokens per request (prompt + completion): a request's weight (seed S3 section 7).
inline constexpr std::array<double, 10> kTokenBounds = {16, 64, 256, 1024, 4096, 16384, 65536, 131072, 262144, 1048576};

template <const auto& Bounds>
class BasicHistogram {
 public:
  static constexpr const auto& kBounds = Bounds;
  void observe(double v) {
    std::size_t i = 0;
    while (i < Bounds.size() && v > Bounds[i]) ++i;
    ++buckets_[i];
    ++count_;
    sum_ += v;
  }
  void merge(const BasicHistogram& other) {
    for (std::size_t i = 0; i < buckets_.size(); ++i) buckets_[i] += other.buckets_[i];
    count_ += other.count_;
    sum_ += other.sum_;
  }
  const std::array<std::uint64_t, Bounds.size() + 1>& buckets() const { return buckets_; }  // last = +Inf
  std::uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::array<std::uint64_t, Bounds.size() + 1> buckets_{};
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

using Histogram = BasicHistogram<kSecondsBounds>;
using FineHistogram = BasicHistogram<kFineBounds>;
using TokenHistogram = BasicHistogram<kTokenBounds>;

struct ModelSeries {
  std::map<int, std::uint64_t> requests_by_status;
  Histogram duration;
  Histogram ttft;
  FineHistogram inter_token;  // a stream's mean gap between events, once per stream
  TokenHistogram tokens;      // prompt + completion tokens per answered request
  std::uint64_t prompt_tokens = 0;
  std::uint64_t completion_tokens = 0;
  std::uint64_t cached_tokens = 0;
  double cost_usd = 0;  // from the model's pricing; 0 without one
};

// Orders (string, string) keys and lets lookups use string_views (no key allocation).
struct PairLess {
  using is_transparent = void;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const {
    return std::pair<std::string_view, std::string_view>(a.first, a.second) <
           std::pair<std::string_view, std::string_view>(b.first, b.second);
  }
};

// Per deployment: requests by status (failed attempts included: each attempt is a
// call of its deployment) and the upstream's time per attempt.
struct DeploymentSeries {
  std::map<int, std::uint64_t> requests_by_status;
  Histogram upstream;
};

// The response cache, per (model, status: hit, miss, bypass, refresh).
struct CacheSeries {
  std::uint64_t requests = 0;
  std::uint64_t tokens_saved = 0;  // hits: the tokens their answers cost when made
  double cost_saved_usd = 0;       // and what those cost, by the model's pricing
};

struct WorkerMetrics {
  // Keyed by (model, provider). std::map keeps the exposition order stable.
  std::map<std::pair<std::string, std::string>, ModelSeries, PairLess> models;
  std::map<std::pair<std::string, std::string>, DeploymentSeries, PairLess> deployments;  // (model, deployment)
  std::map<std::string, std::map<int, std::uint64_t>, std::less<>> routes;                // route name -> status
  // Rate-limit decisions by store ("memory", "redis", "local_fallback") and their time.
  std::map<std::string, FineHistogram, std::less<>> limit_decisions;
  std::map<std::pair<std::string, std::string>, std::uint64_t, PairLess> upstream_errors;  // (provider, kind)
  std::map<std::string, std::uint64_t, std::less<>> upstream_connections_opened;               // provider
  std::map<std::string, std::uint64_t, std::less<>> upstream_retries;                          // provider
  std::map<std::pair<std::string, std::string>, std::uint64_t, PairLess> upstream_timeouts;    // (provider, kind)
  // (provider, deployment, to)
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> breaker_transitions;
  // Filled when scraped, not on the request path: (provider, deployment) -> how many
  // workers have its breaker closed, open, half-open.
  std::map<std::pair<std::string, std::string>, std::array<std::uint64_t, 3>, PairLess> breaker_states;
  std::map<std::string, std::uint64_t, std::less<>> bulkhead_rejections;  // scope: global, route:<name>
  std::map<std::string, std::uint64_t, std::less<>> auth_failures;        // code: missing_api_key, invalid_api_key
  // The jwt link's tokens per issuer, by result (kJwtResults names them: cached,
  // verified, then each reason of a refusal). Bounded: issuers are configured. The link
  // keeps a pointer to its issuer's row (map nodes do not move).
  static constexpr std::size_t kJwtResultCount = 13;
  std::map<std::string, std::array<std::uint64_t, kJwtResultCount>, std::less<>> jwt_tokens;
  // Fetches of an issuer's discovery document and keys: (succeeded, failed).
  std::map<std::string, std::array<std::uint64_t, 2>, std::less<>> jwt_key_fetches;
  // Requests refused by a rate limit, quota or budget: (scope, limit), e.g.
  // ("tenant", "requests_per_minute"), ("key", "usd_per_day").
  std::map<std::pair<std::string, std::string>, std::uint64_t, PairLess> limit_rejections;
  std::uint64_t streams_ended_over_budget = 0;  // rate_limits.end_streams_over_budget
  // Per tenant (server.tenant_metrics, opt-in; at most kMaxTenantSeries tenants, the rest
  // under "other"): requests by status, tokens, cost.
  struct TenantSeries {
    std::map<int, std::uint64_t> requests_by_status;
    std::uint64_t prompt_tokens = 0;
    std::uint64_t completion_tokens = 0;
    double cost_usd = 0;
  };
  static constexpr std::size_t kMaxTenantSeries = 1000;
  std::map<std::string, TenantSeries, std::less<>> tenants;
  // Lua plugins: calls by (plugin, phase, outcome: ok, error, cpu_budget, memory_budget,
  // slice, breaker_open), the CPU time of each call by plugin, and the plugins' own
  // counters (plugin, name). The plugin filter keeps pointers to its entries (map nodes
  // do not move), so a call costs no lookup.
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> plugin_calls;
  std::map<std::string, FineHistogram, std::less<>> plugin_call_seconds;
  std::map<std::pair<std::string, std::string>, std::uint64_t, PairLess> plugin_counters;
  // Their key-value operations by (plugin, op: get | put | erase, result: found |
  // missing | ok | error | unavailable).
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> plugin_kv;
  // Their outbound HTTP calls by (plugin, result: 2xx..5xx, timeout, error, breaker_open).
  std::map<std::pair<std::string, std::string>, std::uint64_t, PairLess> plugin_http;
  // Stored responses (Responses API state) by (op: store | get | delete | expand,
  // result: ok | missing | unavailable | error).
  std::map<std::pair<std::string, std::string>, std::uint64_t, PairLess> stored_responses;
  std::map<std::pair<std::string, std::string>, CacheSeries, PairLess> cache;
  // Guardrail verdicts by (policy, rule, action: block | redact | flag, stage: input |
  // output), once per request each.
  std::map<std::tuple<std::string, std::string, std::string, std::string>, std::uint64_t> guardrail_actions;
  // Answer-quality checks by (policy, rule, verdict: ok | low | unchecked).
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> guardrail_quality;
  // The MCP gateway: tools/call by (server, tool, outcome; an unknown tool has empty
  // labels), sessions made, and tool definitions found changed (held for approval) by server.
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> mcp_tool_calls;
  std::uint64_t mcp_sessions_total = 0;
  std::map<std::string, std::uint64_t, std::less<>> mcp_tool_changes;
  std::int64_t active_streams = 0;
  std::int64_t realtime_sessions = 0;        // Realtime WebSockets being relayed now
  std::uint64_t realtime_sessions_total = 0; // accepted (upgraded)
  std::int64_t active_connections = 0;
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_rejected = 0;  // over server.max_connections
  std::uint64_t stream_buffer_overflows = 0;  // streams ended: the client fell behind server.stream_buffer_bytes
  // Lingering closes after an answer given before the body was read, by how they ended
  // (eof, time, timeout, bytes: the order of kLingerEnds), and the bytes they discarded.
  std::array<std::uint64_t, 4> lingering_closes{};
  std::uint64_t lingering_bytes = 0;

  ModelSeries& series(std::string_view model, std::string_view provider);
  void merge(const WorkerMetrics& other);
};

// A Prometheus label value with \\, " and newlines escaped.
std::string escapeLabel(std::string_view v);

// Prometheus text exposition format (version 0.0.4).
std::string renderPrometheus(const WorkerMetrics& merged);

}  // namespace tahua
