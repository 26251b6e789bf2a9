// The configuration snapshot. Built once by the loader, validated, then shared
// read-only (std::shared_ptr<const Config>) by every worker; a request keeps the
// snapshot it started with alive for its whole life.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

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
  Millis drain_timeout{30'000};
  Millis drain_accept_grace{0};  // after SIGTERM keep accepting this long (readyz already 503)
  Millis stream_heartbeat{15'000};  // SSE comment on a stream idle this long; 0 = off
};

// Concurrency caps for the whole gateway (0 = none). Per tenant/key caps come with tenants.
struct LimitsConfig {
  std::size_t max_concurrent_requests = 0;
  std::size_t max_concurrent_streams = 0;
};

struct AccessLogConfig {
  bool enabled = true;
  std::string path = "-";
};

enum class ProviderType { OpenAI, AzureOpenAI, Anthropic, Gemini, Bedrock, Mock };

std::string_view providerTypeName(ProviderType t);

struct ProviderTimeouts {
  Millis connect{5'000};
  Millis first_byte{120'000};
  Millis idle{60'000};
  Millis total{600'000};
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
  int window = 20;                 // the last N calls are judged
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
  ProviderType type = ProviderType::OpenAI;
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
};

struct ModelConfig {
  std::string name;
  std::string provider;
  std::string upstream_model;
  std::size_t provider_index = 0;
  Pricing pricing;
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

struct Config {
  std::string source;  // file path, or "<built-in>"
  ServerConfig server;
  std::vector<ListenerConfig> listeners;
  AccessLogConfig access_log;
  LimitsConfig limits;
  std::vector<ProviderConfig> providers;
  std::vector<ModelConfig> models;
  std::unordered_map<std::string, std::size_t, StringHash, std::equal_to<>> model_index;

  const ModelConfig* findModel(std::string_view name) const {
    auto it = model_index.find(name);
    return it == model_index.end() ? nullptr : &models[it->second];
  }
  bool anyProviderUsable() const {
    for (const auto& p : providers)
      if (p.usable) return true;
    return false;
  }
};

using ConfigPtr = std::shared_ptr<const Config>;

struct ConfigLoadResult {
  ConfigPtr config;   // set on success
  std::string error;  // "file:line:col: field.path: message" on failure
  std::vector<std::string> warnings;
};

ConfigLoadResult loadConfigFile(const std::string& path);
ConfigLoadResult loadConfigString(std::string_view yaml, std::string_view source_name);

// The built-in default: listens on 127.0.0.1:8080 and serves mock models.
std::string_view defaultConfigYaml();

}  // namespace tahua
