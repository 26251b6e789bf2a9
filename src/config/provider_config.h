// The `providers` section (providers_section.cpp) and the top-level `timeouts`: an
// upstream's endpoint, credentials and resilience settings (timeouts, retry, circuit
// breaker, connection pool). The vendor registry is config/provider_kind.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/duration.h"

namespace tahua {

struct ProviderKind;  // config/provider_kind.h

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

// Vertex AI (Google Cloud): where its models are, and which credential gets the access
// tokens its requests carry (cloud_auth/google_credentials.h). Only paths here: the
// secrets stay in the token cache's sources.
struct GcpConfig {
  std::string project;
  std::string location;          // a region ("us-east5") or "global"
  // Resolved at load, in the order Google's libraries look: at most one is set; neither
  // means the metadata server.
  std::string credentials_file;  // from the config, GOOGLE_APPLICATION_CREDENTIALS or gcloud's well-known file
  std::string credentials_origin;  // which of those, for messages
  std::string token_file;        // a plain bearer token kept fresh by something else
};

// Azure OpenAI with Microsoft Entra ID (cloud_auth/azure_credentials.h) instead of an
// api-key: which credential gets the bearer tokens its requests carry, resolved at load
// (the config's, else the environment's, in the order Azure's identity libraries use).
enum class EntraCredential : std::uint8_t { None, ClientSecret, Certificate, WorkloadIdentity, ManagedIdentity };

struct AzureConfig {
  EntraCredential credential = EntraCredential::None;  // None: the api-key header
  std::string origin;          // where the credential came from, for messages ("azure.certificate_file", "AZURE_FEDERATED_TOKEN_FILE")
  std::string authority_host;  // without a trailing slash
  std::string tenant_id;
  std::string client_id;       // the app's; or a user-assigned managed identity's (empty: system-assigned)
  std::string scope;           // https://cognitiveservices.azure.com/.default
  std::string client_secret;   // secret: never logged, never shown
  std::string client_secret_env;
  std::string certificate_file;
  std::string federated_token_file;
  bool entra() const { return credential != EntraCredential::None; }
};

// The client APIs an upstream of OpenAI's wire format may serve itself (an `openai`
// provider's `apis` list). One bit each; files covers batches (a batch is made of files).
enum class ProviderApi : std::uint16_t {
  Chat = 1 << 0,
  Completions = 1 << 1,
  Embeddings = 1 << 2,
  Responses = 1 << 3,
  Moderations = 1 << 4,
  Images = 1 << 5,
  Audio = 1 << 6,
  Rerank = 1 << 7,
  Files = 1 << 8,
  Realtime = 1 << 9,
};
// The names in the config, in bit order.
inline constexpr std::string_view kProviderApiNames[] = {"chat",  "completions", "embeddings", "responses", "moderations",
                                                         "images", "audio",      "rerank",     "files",     "realtime"};
// Every API but Responses: chat completions is what every OpenAI-compatible server
// serves, /v1/responses only some, and a translated Responses request works everywhere
// (tahua keeps its state). The rest cannot be translated: passing them through costs
// nothing where they are missing (the server's own 404).
inline constexpr std::uint16_t kDefaultProviderApis = 0x3FF & ~static_cast<std::uint16_t>(ProviderApi::Responses);

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
  // Vendor specifics (see docs/providers.md).
  std::string anthropic_version = "2023-06-01";  // anthropic: the anthropic-version header
  std::int64_t default_max_tokens = 4096;        // anthropic, bedrock: when the client sent none
  std::string api_version;                       // azure-openai: the api-version query parameter
  bool stream_usage = true;  // openai-format streams: ask for usage upstream, hide it if the client did not
  // openai: the APIs the upstream serves itself (ProviderApi bits); the others are
  // translated through chat completions where they can be, else refused.
  std::uint16_t apis = kDefaultProviderApis;
  bool serves(ProviderApi api) const { return (apis & static_cast<std::uint16_t>(api)) != 0; }
  AwsConfig aws;             // bedrock
  GcpConfig gcp;             // vertex
  AzureConfig azure;         // azure-openai with Entra ID
  // Providers whose requests carry a cloud access token (vertex, azure-openai with Entra
  // ID): how long a request waits for the credential's first token before it is a 503
  // saying why.
  Millis token_wait{10'000};
};

}  // namespace tahua
