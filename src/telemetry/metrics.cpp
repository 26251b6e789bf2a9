#include "telemetry/metrics.h"

#include <algorithm>
#include <cstdio>

namespace tahua {

ModelSeries& WorkerMetrics::series(std::string_view model, std::string_view provider) {
  // Heterogeneous lookup: no key strings are built for an existing series.
  auto it = models.find(std::pair<std::string_view, std::string_view>(model, provider));
  if (it != models.end()) return it->second;
  return models[{std::string(model), std::string(provider)}];
}

void WorkerMetrics::merge(const WorkerMetrics& other) {
  for (const auto& [key, s] : other.models) {
    auto& mine = models[key];
    for (auto [status, n] : s.requests_by_status) mine.requests_by_status[status] += n;
    mine.duration.merge(s.duration);
    mine.ttft.merge(s.ttft);
    mine.inter_token.merge(s.inter_token);
    mine.tokens.merge(s.tokens);
    mine.prompt_tokens += s.prompt_tokens;
    mine.completion_tokens += s.completion_tokens;
    mine.cached_tokens += s.cached_tokens;
    mine.cost_usd += s.cost_usd;
  }
  for (const auto& [key, d] : other.deployments) {
    DeploymentSeries& mine = deployments[key];
    for (auto [status, n] : d.requests_by_status) mine.requests_by_status[status] += n;
    mine.upstream.merge(d.upstream);
  }
  for (const auto& [route, by_status] : other.routes)
    for (auto [status, n] : by_status) routes[route][status] += n;
  for (const auto& [store, h] : other.limit_decisions) limit_decisions[store].merge(h);
  for (const auto& [key, n] : other.upstream_errors) upstream_errors[key] += n;
  for (const auto& [key, n] : other.upstream_connections_opened) upstream_connections_opened[key] += n;
  for (const auto& [key, n] : other.upstream_retries) upstream_retries[key] += n;
  for (const auto& [key, n] : other.bulkhead_rejections) bulkhead_rejections[key] += n;
  for (const auto& [key, n] : other.auth_failures) auth_failures[key] += n;
  for (const auto& [issuer, row] : other.jwt_tokens)
    for (std::size_t i = 0; i < row.size(); ++i) jwt_tokens[issuer][i] += row[i];
  for (const auto& [issuer, row] : other.jwt_key_fetches)
    for (std::size_t i = 0; i < row.size(); ++i) jwt_key_fetches[issuer][i] += row[i];
  for (const auto& [key, n] : other.limit_rejections) limit_rejections[key] += n;
  streams_ended_over_budget += other.streams_ended_over_budget;
  for (const auto& [tenant, t] : other.tenants) {
    TenantSeries& mine = tenants[tenant];
    for (const auto& [status, n] : t.requests_by_status) mine.requests_by_status[status] += n;
    mine.prompt_tokens += t.prompt_tokens;
    mine.completion_tokens += t.completion_tokens;
    mine.cost_usd += t.cost_usd;
  }
  for (const auto& [key, n] : other.upstream_timeouts) upstream_timeouts[key] += n;
  for (const auto& [key, n] : other.breaker_transitions) breaker_transitions[key] += n;
  for (const auto& [key, n] : other.plugin_calls) plugin_calls[key] += n;
  for (const auto& [plugin, h] : other.plugin_call_seconds) plugin_call_seconds[plugin].merge(h);
  for (const auto& [key, n] : other.plugin_counters) plugin_counters[key] += n;
  for (const auto& [key, n] : other.plugin_kv) plugin_kv[key] += n;
  for (const auto& [key, n] : other.stored_responses) stored_responses[key] += n;
  for (const auto& [key, n] : other.guardrail_actions) guardrail_actions[key] += n;
  for (const auto& [key, n] : other.guardrail_quality) guardrail_quality[key] += n;
  for (const auto& [key, c] : other.cache) {
    CacheSeries& mine = cache[key];
    mine.requests += c.requests;
    mine.tokens_saved += c.tokens_saved;
    mine.cost_saved_usd += c.cost_saved_usd;
  }
  for (const auto& [key, n] : other.plugin_http) plugin_http[key] += n;
  for (const auto& [key, n] : other.mcp_tool_calls) mcp_tool_calls[key] += n;
  mcp_sessions_total += other.mcp_sessions_total;
  for (const auto& [key, n] : other.mcp_tool_changes) mcp_tool_changes[key] += n;
  active_streams += other.active_streams;
  realtime_sessions += other.realtime_sessions;
  realtime_sessions_total += other.realtime_sessions_total;
  active_connections += other.active_connections;
  connections_accepted += other.connections_accepted;
  connections_rejected += other.connections_rejected;
  for (std::size_t i = 0; i < lingering_closes.size(); ++i) lingering_closes[i] += other.lingering_closes[i];
  lingering_bytes += other.lingering_bytes;
  stream_buffer_overflows += other.stream_buffer_overflows;
  for (const auto& [key, n] : other.breaker_states)
    for (std::size_t i = 0; i < n.size(); ++i) breaker_states[key][i] += n[i];
}

// Label values are config names or fixed words, but escape anyway: \ " and newline.
std::string escapeLabel(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

namespace {

std::string formatDouble(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

template <class H>
void renderHistogram(std::string& out, std::string_view name, const std::string& labels, const H& h) {
  std::uint64_t cumulative = 0;
  const std::string prefix = labels.empty() ? std::string("{") : "{" + labels + ",";
  for (std::size_t i = 0; i < H::kBounds.size(); ++i) {
    cumulative += h.buckets()[i];
    out += std::string(name) + "_bucket" + prefix + "le=\"" + formatDouble(H::kBounds[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += h.buckets().back();
  out += std::string(name) + "_bucket" + prefix + "le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  const std::string braces = labels.empty() ? std::string() : "{" + labels + "}";
  out += std::string(name) + "_sum" + braces + " " + formatDouble(h.sum()) + "\n";
  out += std::string(name) + "_count" + braces + " " + std::to_string(h.count()) + "\n";
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ").append(type).append("\n");
}

}  // namespace

std::string renderPrometheus(const WorkerMetrics& m) {
  std::string out;
  out.reserve(4096 + m.models.size() * 4096);
  out += "# HELP tahua_requests_total Requests answered, by model, provider and HTTP status.\n";
  out += "# TYPE tahua_requests_total counter\n";
  for (const auto& [key, s] : m.models) {
    std::string labels = "model=\"" + escapeLabel(key.first) + "\",provider=\"" + escapeLabel(key.second) + "\"";
    for (auto [status, n] : s.requests_by_status)
      out += "tahua_requests_total{" + labels + ",status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  }
  out += "# HELP tahua_request_duration_seconds Time from request received to response complete.\n";
  out += "# TYPE tahua_request_duration_seconds histogram\n";
  for (const auto& [key, s] : m.models) {
    std::string labels = "model=\"" + escapeLabel(key.first) + "\",provider=\"" + escapeLabel(key.second) + "\"";
    renderHistogram(out, "tahua_request_duration_seconds", labels, s.duration);
  }
  out += "# HELP tahua_time_to_first_token_seconds Time from request received to the first response byte sent.\n";
  out += "# TYPE tahua_time_to_first_token_seconds histogram\n";
  for (const auto& [key, s] : m.models) {
    std::string labels = "model=\"" + escapeLabel(key.first) + "\",provider=\"" + escapeLabel(key.second) + "\"";
    renderHistogram(out, "tahua_time_to_first_token_seconds", labels, s.ttft);
  }
  family(out, "tahua_inter_token_latency_seconds", "histogram",
         "Mean gap between the events of one stream (after the first), observed once per stream.");
  for (const auto& [key, s] : m.models) {
    std::string labels = "model=\"" + escapeLabel(key.first) + "\",provider=\"" + escapeLabel(key.second) + "\"";
    renderHistogram(out, "tahua_inter_token_latency_seconds", labels, s.inter_token);
  }
  family(out, "tahua_request_tokens", "histogram", "Prompt plus completion tokens per answered request (its weight).");
  for (const auto& [key, s] : m.models) {
    std::string labels = "model=\"" + escapeLabel(key.first) + "\",provider=\"" + escapeLabel(key.second) + "\"";
    renderHistogram(out, "tahua_request_tokens", labels, s.tokens);
  }
  family(out, "tahua_deployment_requests_total", "counter",
         "Upstream calls by model, deployment and HTTP status (a failed attempt counts for its deployment).");
  for (const auto& [key, d] : m.deployments)
    for (auto [status, n] : d.requests_by_status)
      out += "tahua_deployment_requests_total{model=\"" + escapeLabel(key.first) + "\",deployment=\"" + escapeLabel(key.second) +
             "\",status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  family(out, "tahua_upstream_duration_seconds", "histogram",
         "Time of one upstream attempt, from sending the request to its last byte, by model and deployment.");
  for (const auto& [key, d] : m.deployments)
    renderHistogram(out, "tahua_upstream_duration_seconds",
                    "model=\"" + escapeLabel(key.first) + "\",deployment=\"" + escapeLabel(key.second) + "\"", d.upstream);
  family(out, "tahua_route_requests_total", "counter", "Requests a declarative route chose the model for, by route and status.");
  for (const auto& [route, by_status] : m.routes)
    for (auto [status, n] : by_status)
      out += "tahua_route_requests_total{route=\"" + escapeLabel(route) + "\",status=\"" + std::to_string(status) + "\"} " +
             std::to_string(n) + "\n";
  family(out, "tahua_rate_limit_decisions_total", "counter",
         "Rate-limit admissions decided, by store: memory (in process), redis, local_fallback (Redis did not answer).");
  for (const auto& [store, h] : m.limit_decisions)
    out += "tahua_rate_limit_decisions_total{store=\"" + escapeLabel(store) + "\"} " + std::to_string(h.count()) + "\n";
  family(out, "tahua_rate_limit_decision_duration_seconds", "histogram",
         "Time from asking the store to its decision, by store (a Redis round trip, or none).");
  for (const auto& [store, h] : m.limit_decisions)
    renderHistogram(out, "tahua_rate_limit_decision_duration_seconds", "store=\"" + escapeLabel(store) + "\"", h);
  out += "# HELP tahua_tokens_total Tokens reported by upstream usage, by type.\n";
  out += "# TYPE tahua_tokens_total counter\n";
  for (const auto& [key, s] : m.models) {
    std::string labels = "model=\"" + escapeLabel(key.first) + "\",provider=\"" + escapeLabel(key.second) + "\"";
    out += "tahua_tokens_total{" + labels + ",type=\"prompt\"} " + std::to_string(s.prompt_tokens) + "\n";
    out += "tahua_tokens_total{" + labels + ",type=\"completion\"} " + std::to_string(s.completion_tokens) + "\n";
    out += "tahua_tokens_total{" + labels + ",type=\"cached_prompt\"} " + std::to_string(s.cached_tokens) + "\n";
  }
  out += "# HELP tahua_cost_usd_total Cost of answered requests from the models' configured prices, in USD.\n";
  out += "# TYPE tahua_cost_usd_total counter\n";
  for (const auto& [key, s] : m.models) {
    if (key.first.empty()) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", s.cost_usd);
    out += "tahua_cost_usd_total{model=\"" + escapeLabel(key.first) + "\",provider=\"" + escapeLabel(key.second) + "\"} " +
           buf + "\n";
  }
  out += "# HELP tahua_upstream_errors_total Upstream failures seen by the gateway, by kind.\n";
  out += "# TYPE tahua_upstream_errors_total counter\n";
  for (const auto& [key, n] : m.upstream_errors)
    out += "tahua_upstream_errors_total{provider=\"" + escapeLabel(key.first) + "\",kind=\"" + escapeLabel(key.second) +
           "\"} " + std::to_string(n) + "\n";
  out += "# HELP tahua_upstream_timeouts_total Upstream timeouts by which limit expired (connect, first_byte, idle, total).\n";
  out += "# TYPE tahua_upstream_timeouts_total counter\n";
  for (const auto& [key, n] : m.upstream_timeouts)
    out += "tahua_upstream_timeouts_total{provider=\"" + escapeLabel(key.first) + "\",kind=\"" + escapeLabel(key.second) +
           "\"} " + std::to_string(n) + "\n";
  out += "# HELP tahua_upstream_connections_opened_total New upstream connections (not reused from the pool).\n";
  out += "# TYPE tahua_upstream_connections_opened_total counter\n";
  for (const auto& [provider, n] : m.upstream_connections_opened)
    out += "tahua_upstream_connections_opened_total{provider=\"" + escapeLabel(provider) + "\"} " + std::to_string(n) +
           "\n";
  out += "# HELP tahua_circuit_breaker_state Workers whose breaker of a deployment is in each state.\n";
  out += "# TYPE tahua_circuit_breaker_state gauge\n";
  for (const auto& [key, n] : m.breaker_states) {
    static constexpr const char* kStates[] = {"closed", "open", "half_open"};
    for (std::size_t i = 0; i < n.size(); ++i)
      out += "tahua_circuit_breaker_state{provider=\"" + escapeLabel(key.first) + "\",deployment=\"" + escapeLabel(key.second) +
             "\",state=\"" + kStates[i] + "\"} " + std::to_string(n[i]) + "\n";
  }
  out += "# HELP tahua_bulkhead_rejections_total Requests refused 429 over a concurrency cap, by scope (global, route:<name>).\n";
  out += "# TYPE tahua_bulkhead_rejections_total counter\n";
  for (const auto& [scope, n] : m.bulkhead_rejections)
    out += "tahua_bulkhead_rejections_total{scope=\"" + escapeLabel(scope) + "\"} " + std::to_string(n) + "\n";
  out += "# HELP tahua_auth_failures_total Requests refused 401, by code (missing_api_key, invalid_api_key).\n";
  out += "# TYPE tahua_auth_failures_total counter\n";
  for (const auto& [code, n] : m.auth_failures)
    out += "tahua_auth_failures_total{code=\"" + escapeLabel(code) + "\"} " + std::to_string(n) + "\n";
  {
    // The order of WorkerMetrics::jwt_tokens' rows: cached, verified, then jwt::Failure's
    // codes in order, then no_tenant.
    static constexpr const char* kResults[WorkerMetrics::kJwtResultCount] = {
        "cached",        "verified",  "malformed",     "too_large",      "unsupported_alg", "unknown_key", "bad_signature",
        "expired",       "not_yet_valid", "wrong_issuer", "wrong_audience", "missing_claim",   "no_tenant"};
    out += "# HELP tahua_jwt_tokens_total Bearer JWTs the jwt link answered, by issuer and result (cached, verified, or the "
           "reason of a 401).\n";
    out += "# TYPE tahua_jwt_tokens_total counter\n";
    for (const auto& [issuer, row] : m.jwt_tokens)
      for (std::size_t i = 0; i < row.size(); ++i)
        if (row[i])
          out += "tahua_jwt_tokens_total{issuer=\"" + escapeLabel(issuer) + "\",result=\"" + kResults[i] + "\"} " +
                 std::to_string(row[i]) + "\n";
    out += "# HELP tahua_jwt_key_fetches_total Fetches of an issuer's keys (discovery and JWKS), by outcome.\n";
    out += "# TYPE tahua_jwt_key_fetches_total counter\n";
    for (const auto& [issuer, row] : m.jwt_key_fetches) {
      out += "tahua_jwt_key_fetches_total{issuer=\"" + escapeLabel(issuer) + "\",outcome=\"ok\"} " + std::to_string(row[0]) + "\n";
      out += "tahua_jwt_key_fetches_total{issuer=\"" + escapeLabel(issuer) + "\",outcome=\"failed\"} " + std::to_string(row[1]) + "\n";
    }
  }
  out += "# HELP tahua_rate_limited_total Requests refused 429 by a rate limit, quota or budget, by scope and limit.\n";
  out += "# TYPE tahua_rate_limited_total counter\n";
  for (const auto& [key, n] : m.limit_rejections)
    out += "tahua_rate_limited_total{scope=\"" + escapeLabel(key.first) + "\",limit=\"" + escapeLabel(key.second) + "\"} " +
           std::to_string(n) + "\n";
  out += "# HELP tahua_streams_ended_over_budget_total Streams ended with an error event: their output passed what a token limit still allowed.\n";
  out += "# TYPE tahua_streams_ended_over_budget_total counter\n";
  out += "tahua_streams_ended_over_budget_total " + std::to_string(m.streams_ended_over_budget) + "\n";
  if (!m.tenants.empty()) {
    out += "# HELP tahua_tenant_requests_total Requests per tenant and status (server.tenant_metrics).\n";
    out += "# TYPE tahua_tenant_requests_total counter\n";
    for (const auto& [tenant, t] : m.tenants)
      for (const auto& [status, n] : t.requests_by_status)
        out += "tahua_tenant_requests_total{tenant=\"" + escapeLabel(tenant) + "\",status=\"" + std::to_string(status) + "\"} " +
               std::to_string(n) + "\n";
    out += "# HELP tahua_tenant_tokens_total Tokens per tenant and type (server.tenant_metrics).\n";
    out += "# TYPE tahua_tenant_tokens_total counter\n";
    for (const auto& [tenant, t] : m.tenants) {
      out += "tahua_tenant_tokens_total{tenant=\"" + escapeLabel(tenant) + "\",type=\"prompt\"} " + std::to_string(t.prompt_tokens) + "\n";
      out += "tahua_tenant_tokens_total{tenant=\"" + escapeLabel(tenant) + "\",type=\"completion\"} " + std::to_string(t.completion_tokens) + "\n";
    }
    out += "# HELP tahua_tenant_cost_usd_total Cost per tenant from the models' pricing (server.tenant_metrics).\n";
    out += "# TYPE tahua_tenant_cost_usd_total counter\n";
    for (const auto& [tenant, t] : m.tenants) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6f", t.cost_usd);
      out += "tahua_tenant_cost_usd_total{tenant=\"" + escapeLabel(tenant) + "\"} " + buf + "\n";
    }
  }
  out += "# HELP tahua_upstream_retries_total Upstream tries repeated (before any byte reached the client).\n";
  out += "# TYPE tahua_upstream_retries_total counter\n";
  for (const auto& [provider, n] : m.upstream_retries)
    out += "tahua_upstream_retries_total{provider=\"" + escapeLabel(provider) + "\"} " + std::to_string(n) + "\n";
  out += "# HELP tahua_circuit_breaker_transitions_total Circuit breaker state changes (summed over workers).\n";
  out += "# TYPE tahua_circuit_breaker_transitions_total counter\n";
  for (const auto& [key, n] : m.breaker_transitions)
    out += "tahua_circuit_breaker_transitions_total{provider=\"" + escapeLabel(std::get<0>(key)) + "\",deployment=\"" +
           escapeLabel(std::get<1>(key)) + "\",to=\"" + escapeLabel(std::get<2>(key)) + "\"} " + std::to_string(n) + "\n";
  family(out, "tahua_plugin_calls_total", "counter",
         "Lua plugin calls by plugin, phase and outcome (ok, error, cpu_budget, memory_budget, slice, breaker_open).");
  for (const auto& [key, n] : m.plugin_calls)
    out += "tahua_plugin_calls_total{plugin=\"" + escapeLabel(std::get<0>(key)) + "\",phase=\"" + escapeLabel(std::get<1>(key)) +
           "\",outcome=\"" + escapeLabel(std::get<2>(key)) + "\"} " + std::to_string(n) + "\n";
  family(out, "tahua_plugin_call_duration_seconds", "histogram", "Time a Lua plugin call ran on its worker (its slices summed), by plugin.");
  for (const auto& [plugin, h] : m.plugin_call_seconds)
    renderHistogram(out, "tahua_plugin_call_duration_seconds", "plugin=\"" + escapeLabel(plugin) + "\"", h);
  family(out, "tahua_plugin_counter_total", "counter", "Counters a Lua plugin increments (tahua.count), by plugin and name.");
  for (const auto& [key, n] : m.plugin_counters)
    out += "tahua_plugin_counter_total{plugin=\"" + escapeLabel(key.first) + "\",name=\"" + escapeLabel(key.second) + "\"} " +
           std::to_string(n) + "\n";
  family(out, "tahua_plugin_kv_operations_total", "counter",
         "Lua plugins' key-value operations by plugin, op (get, put, erase) and result (found, missing, ok, error, unavailable).");
  for (const auto& [key, n] : m.plugin_kv)
    out += "tahua_plugin_kv_operations_total{plugin=\"" + escapeLabel(std::get<0>(key)) + "\",op=\"" + escapeLabel(std::get<1>(key)) +
           "\",result=\"" + escapeLabel(std::get<2>(key)) + "\"} " + std::to_string(n) + "\n";
  family(out, "tahua_plugin_http_calls_total", "counter",
         "Lua plugins' outbound HTTP calls by plugin and result (2xx, 3xx, 4xx, 5xx, timeout, error, breaker_open, not_allowed).");
  for (const auto& [key, n] : m.plugin_http)
    out += "tahua_plugin_http_calls_total{plugin=\"" + escapeLabel(key.first) + "\",result=\"" + escapeLabel(key.second) + "\"} " +
           std::to_string(n) + "\n";
  family(out, "tahua_cache_requests_total", "counter",
         "Requests to models with the response cache, by model and cache status (hit, miss, bypass, refresh).");
  for (const auto& [key, c] : m.cache)
    out += "tahua_cache_requests_total{model=\"" + escapeLabel(key.first) + "\",status=\"" + escapeLabel(key.second) + "\"} " +
           std::to_string(c.requests) + "\n";
  family(out, "tahua_cache_tokens_saved_total", "counter", "Tokens the cache's hits did not spend upstream, by model and status (hit, semantic-hit).");
  for (const auto& [key, c] : m.cache)
    if (key.second == "hit" || key.second == "semantic-hit")
      out += "tahua_cache_tokens_saved_total{model=\"" + escapeLabel(key.first) + "\",status=\"" + escapeLabel(key.second) + "\"} " +
             std::to_string(c.tokens_saved) + "\n";
  family(out, "tahua_cache_cost_saved_usd_total", "counter",
         "What the cache's hits did not spend upstream, by the model's pricing, by model and status (hit, semantic-hit).");
  for (const auto& [key, c] : m.cache)
    if (key.second == "hit" || key.second == "semantic-hit")
      out += "tahua_cache_cost_saved_usd_total{model=\"" + escapeLabel(key.first) + "\",status=\"" + escapeLabel(key.second) + "\"} " +
             formatDouble(c.cost_saved_usd) + "\n";
  family(out, "tahua_stored_responses_total", "counter",
         "Stored responses (Responses API state) by op (store, get, delete, expand) and result (ok, missing, unavailable, error).");
  for (const auto& [key, n] : m.stored_responses)
    out += "tahua_stored_responses_total{op=\"" + escapeLabel(key.first) + "\",result=\"" + escapeLabel(key.second) + "\"} " +
           std::to_string(n) + "\n";
  family(out, "tahua_guardrail_actions_total", "counter",
         "Guardrail verdicts by policy, rule, action (block, redact, flag) and stage (input, output); once per request each.");
  for (const auto& [key, n] : m.guardrail_actions)
    out += "tahua_guardrail_actions_total{policy=\"" + escapeLabel(std::get<0>(key)) + "\",rule=\"" + escapeLabel(std::get<1>(key)) +
           "\",action=\"" + escapeLabel(std::get<2>(key)) + "\",stage=\"" + escapeLabel(std::get<3>(key)) + "\"} " + std::to_string(n) + "\n";
  family(out, "tahua_guardrail_quality_checks_total", "counter",
         "Answer-quality checks by policy, rule and verdict (ok, low: below the threshold, unchecked: no embedding in time).");
  for (const auto& [key, n] : m.guardrail_quality)
    out += "tahua_guardrail_quality_checks_total{policy=\"" + escapeLabel(std::get<0>(key)) + "\",rule=\"" + escapeLabel(std::get<1>(key)) +
           "\",verdict=\"" + escapeLabel(std::get<2>(key)) + "\"} " + std::to_string(n) + "\n";
  family(out, "tahua_mcp_tool_calls_total", "counter",
         "MCP tools/call requests by server, tool and outcome (ok, error, tool_error, unknown_tool, invalid_arguments, server_unavailable, too_large, failed).");
  for (const auto& [key, n] : m.mcp_tool_calls)
    out += "tahua_mcp_tool_calls_total{server=\"" + escapeLabel(std::get<0>(key)) + "\",tool=\"" + escapeLabel(std::get<1>(key)) +
           "\",outcome=\"" + escapeLabel(std::get<2>(key)) + "\"} " + std::to_string(n) + "\n";
  out += "# HELP tahua_mcp_sessions_total MCP sessions the gateway opened (initialize).\n";
  out += "# TYPE tahua_mcp_sessions_total counter\n";
  out += "tahua_mcp_sessions_total " + std::to_string(m.mcp_sessions_total) + "\n";
  family(out, "tahua_mcp_tool_changes_total", "counter",
         "MCP tools found with a definition other than the approved one (hidden until approved), by server.");
  for (const auto& [server, n] : m.mcp_tool_changes)
    out += "tahua_mcp_tool_changes_total{server=\"" + escapeLabel(server) + "\"} " + std::to_string(n) + "\n";
  out += "# HELP tahua_active_streams Event streams being relayed now.\n";
  out += "# TYPE tahua_active_streams gauge\n";
  out += "tahua_active_streams " + std::to_string(m.active_streams) + "\n";
  out += "# HELP tahua_realtime_sessions Realtime WebSocket sessions being relayed now.\n";
  out += "# TYPE tahua_realtime_sessions gauge\n";
  out += "tahua_realtime_sessions " + std::to_string(m.realtime_sessions) + "\n";
  out += "# HELP tahua_realtime_sessions_total Realtime WebSocket sessions accepted (upgraded).\n";
  out += "# TYPE tahua_realtime_sessions_total counter\n";
  out += "tahua_realtime_sessions_total " + std::to_string(m.realtime_sessions_total) + "\n";
  out += "# HELP tahua_active_connections Client connections open now.\n";
  out += "# TYPE tahua_active_connections gauge\n";
  out += "tahua_active_connections " + std::to_string(m.active_connections) + "\n";
  out += "# HELP tahua_connections_accepted_total Client connections accepted.\n";
  out += "# TYPE tahua_connections_accepted_total counter\n";
  out += "tahua_connections_accepted_total " + std::to_string(m.connections_accepted) + "\n";
  out += "# HELP tahua_lingering_closes_total Connections that read and discarded a request body after answering before it was read, by how that ended (eof: the client closed; time: server.lingering_time; timeout: server.lingering_timeout; bytes: server.lingering_max_bytes).\n";
  out += "# TYPE tahua_lingering_closes_total counter\n";
  {
    static constexpr const char* kEnds[] = {"eof", "time", "timeout", "bytes"};
    for (std::size_t i = 0; i < m.lingering_closes.size(); ++i)
      out += std::string("tahua_lingering_closes_total{end=\"") + kEnds[i] + "\"} " + std::to_string(m.lingering_closes[i]) + "\n";
  }
  out += "# HELP tahua_lingering_bytes_total Request body bytes read and discarded by lingering closes.\n";
  out += "# TYPE tahua_lingering_bytes_total counter\n";
  out += "tahua_lingering_bytes_total " + std::to_string(m.lingering_bytes) + "\n";
  out += "# HELP tahua_connections_rejected_total Client connections refused over server.max_connections.\n";
  out += "# TYPE tahua_connections_rejected_total counter\n";
  out += "tahua_connections_rejected_total " + std::to_string(m.connections_rejected) + "\n";
  out += "# HELP tahua_stream_buffer_overflows_total Streams ended because the client fell further behind than server.stream_buffer_bytes.\n";
  out += "# TYPE tahua_stream_buffer_overflows_total counter\n";
  out += "tahua_stream_buffer_overflows_total " + std::to_string(m.stream_buffer_overflows) + "\n";
  return out;
}

}  // namespace tahua
