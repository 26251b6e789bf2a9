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

class Histogram {
 public:
  // Upper bounds in seconds; LLM latencies span milliseconds (cache, errors) to minutes.
  static constexpr std::array<double, 16> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                     2.5,   5,    10,    20,   30,  60,   120, 300};
  void observe(double seconds);
  void merge(const Histogram& other);
  const std::array<std::uint64_t, kBounds.size() + 1>& buckets() const { return buckets_; }  // last = +Inf
  std::uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::array<std::uint64_t, kBounds.size() + 1> buckets_{};
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

struct ModelSeries {
  std::map<int, std::uint64_t> requests_by_status;
  Histogram duration;
  Histogram ttft;
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

struct WorkerMetrics {
  // Keyed by (model, provider). std::map keeps the exposition order stable.
  std::map<std::pair<std::string, std::string>, ModelSeries, PairLess> models;
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
  std::int64_t active_streams = 0;
  std::int64_t active_connections = 0;
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_rejected = 0;  // over server.max_connections
  std::uint64_t stream_buffer_overflows = 0;  // streams ended: the client fell behind server.stream_buffer_bytes

  ModelSeries& series(std::string_view model, std::string_view provider);
  void merge(const WorkerMetrics& other);
};

// A Prometheus label value with \\, " and newlines escaped.
std::string escapeLabel(std::string_view v);

// Prometheus text exposition format (version 0.0.4).
std::string renderPrometheus(const WorkerMetrics& merged);

}  // namespace tahua
