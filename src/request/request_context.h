// Per-request state, owned by the session for one request and dropped at its end.
// Filters read and write it, adapters encode from it; nothing here depends on Asio or
// Beast, so a filter is a small translation unit that compiles fast and can be
// unit-tested without sockets. Its own folder, below both filters/ and providers/: the
// secrets filter uses the providers' scrubber, and adapters read the request.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "core/usage.h"
#include "http/request_inspect.h"
#include "telemetry/record_field.h"
#include "telemetry/trace_context.h"

namespace tahua {

struct DeploymentState;
class Resumer;

enum class Endpoint {
  None,
  ChatCompletions,  // OpenAI POST /v1/chat/completions
  Completions,      // OpenAI POST /v1/completions (legacy)
  Embeddings,       // OpenAI POST /v1/embeddings
  Models,           // GET /v1/models
  Responses,        // OpenAI POST /v1/responses
  Messages,         // Anthropic POST /v1/messages
  CountTokens,      // Anthropic POST /v1/messages/count_tokens (answered locally)
  StoredResponse,   // OpenAI GET / DELETE /v1/responses/{id}[/input_items] (answered from the store)
  Moderations,      // OpenAI POST /v1/moderations
  ImagesGenerations,  // OpenAI POST /v1/images/generations
  Rerank,           // POST /v1/rerank (the shape Cohere, Jina and vLLM/TEI serve)
  AudioTranscriptions,  // OpenAI POST /v1/audio/transcriptions (multipart upload)
  AudioTranslations,    // OpenAI POST /v1/audio/translations (multipart upload)
  AudioSpeech,          // OpenAI POST /v1/audio/speech (a binary answer, relayed as it comes)
  ImagesEdits,          // OpenAI POST /v1/images/edits (multipart upload)
  Files,                // OpenAI POST /v1/files (multipart upload), GET /v1/files (list)
  FileObject,           // OpenAI GET, DELETE /v1/files/{id}
  FileContent,          // OpenAI GET /v1/files/{id}/content (relayed as it comes)
  Batches,              // OpenAI POST /v1/batches, GET /v1/batches (list)
  BatchObject,          // OpenAI GET /v1/batches/{id}
  BatchCancel,          // OpenAI POST /v1/batches/{id}/cancel
  Realtime,             // OpenAI GET /v1/realtime?model= (a WebSocket; server/realtime_relay.h)
  Mcp,                  // POST, DELETE /mcp: JSON-RPC to the MCP servers (filters/mcp/)
};
constexpr std::size_t kEndpointCount = 24;  // every Endpoint value (tables indexed by it)
static_assert(static_cast<std::size_t>(Endpoint::Mcp) + 1 == kEndpointCount, "kEndpointCount counts every Endpoint");

// Files and batches: no model, owned by the tenant that made them (filters/files/).
inline bool fileEndpoint(Endpoint e) {
  return e == Endpoint::Files || e == Endpoint::FileObject || e == Endpoint::FileContent || e == Endpoint::Batches ||
         e == Endpoint::BatchObject || e == Endpoint::BatchCancel;
}

// Endpoints that take or give audio: metered in seconds or characters, never by the
// bytes relayed.
inline bool audioEndpoint(Endpoint e) {
  return e == Endpoint::AudioTranscriptions || e == Endpoint::AudioTranslations || e == Endpoint::AudioSpeech;
}

// Endpoints whose body is a multipart/form-data upload (spooled; see request/upload.h).
inline bool uploadEndpoint(Endpoint e) {
  return e == Endpoint::AudioTranscriptions || e == Endpoint::AudioTranslations || e == Endpoint::ImagesEdits ||
         e == Endpoint::Files;  // POST (a GET lists)
}

// Endpoints whose answer is one JSON object, never a stream, and whose request asks for
// no completion: token limits reserve the prompt only.
// The MCP gateway's endpoint: JSON-RPC, no model, no tokens (filters/mcp/ routes it).
inline bool mcpEndpoint(Endpoint e) { return e == Endpoint::Mcp; }

inline bool oneShotEndpoint(Endpoint e) {
  return e == Endpoint::Mcp || e == Endpoint::Embeddings || e == Endpoint::Moderations || e == Endpoint::ImagesGenerations || e == Endpoint::Rerank ||
         e == Endpoint::AudioTranslations || e == Endpoint::AudioSpeech || e == Endpoint::ImagesEdits || fileEndpoint(e);
}

std::string_view endpointPath(Endpoint e);  // "/chat/completions" etc., relative to base_url

// Which vendor's API (and error shape) the client speaks on this endpoint.
enum class ApiFamily { OpenAI, Anthropic };
inline ApiFamily apiFamily(Endpoint e) {
  return e == Endpoint::Messages || e == Endpoint::CountTokens ? ApiFamily::Anthropic : ApiFamily::OpenAI;
}

// The client API's name in logs and records: "openai", "openai-responses", "openai-batch"
// (batches: their creation and their metering), "anthropic", "mcp".
inline std::string_view apiName(Endpoint e) {
  switch (e) {
    case Endpoint::Messages:
    case Endpoint::CountTokens: return "anthropic";
    case Endpoint::Responses: return "openai-responses";
    case Endpoint::Batches: return "openai-batch";
    case Endpoint::Mcp: return "mcp";
    default: return "openai";
  }
}

// Read access to the inbound request headers (case-insensitive names).
class HeaderView {
 public:
  virtual ~HeaderView() = default;
  virtual std::string_view get(std::string_view name) const = 0;
};

// Cost in USD from the model's price table; negative when unknown (no pricing, no usage).
inline double costUsd(const ModelConfig* model, const Usage& u) {
  if (!model || !model->pricing.set ||
      (u.prompt_tokens < 0 && u.completion_tokens < 0 && u.images < 0 && u.audio_seconds < 0 && u.characters < 0))
    return -1;
  const double cached = static_cast<double>(std::max<std::int64_t>(u.cached_tokens, 0));
  const double prompt = static_cast<double>(std::max<std::int64_t>(u.prompt_tokens, 0));
  const double completion = static_cast<double>(std::max<std::int64_t>(u.completion_tokens, 0));
  const Pricing& p = model->pricing;
  const double input = u.batch && p.batch_input >= 0 ? p.batch_input : p.input;
  const double cached_input = u.batch && p.batch_input >= 0 ? p.batch_input : p.cached_input;
  const double output = u.batch && p.batch_output >= 0 ? p.batch_output : p.output;
  return ((prompt - std::min(cached, prompt)) * input + std::min(cached, prompt) * cached_input + completion * output) /
             1e6 +
         static_cast<double>(std::max<std::int64_t>(u.images, 0)) * p.per_image + std::max(u.audio_seconds, 0.0) * p.per_audio_second +
         static_cast<double>(std::max<std::int64_t>(u.characters, 0)) * p.per_character;
}

// A response the gateway makes itself (short-circuit), e.g. /v1/models.
struct LocalReply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  bool replay = false;  // a stored answer replayed (idempotency): no upstream call, nothing billed
};

using SteadyTime = std::chrono::steady_clock::time_point;

// A person or service an identity provider vouched for (the jwt link): who, as the
// issuer names them. Shared by the worker's cache of verified tokens and the requests
// that presented the token.
struct CallerIdentity {
  std::string issuer;   // the issuer's config name (auth.jwt_issuers[].name)
  std::string subject;  // its subject claim: never a metric label (unbounded)
  // The models its token's models claim allows (within the tenant's); unused when
  // `models_claimed` is false.
  std::vector<std::string> models;
  bool models_claimed = false;
};

// Who is calling, as the auth filter established it. Both null when authentication is
// off; `key` is null for a chain's anonymous link. Points into the config (or the key
// table) the request pinned.
struct Principal {
  const TenantConfig* tenant = nullptr;
  const ApiKeyConfig* key = nullptr;
  std::shared_ptr<const CallerIdentity> caller;  // a jwt link's; then `key` is null

  // Whether it may use `model`: its key's list (or its token's), then its tenant's (an
  // empty list: all).
  bool allows(std::string_view model) const {
    auto listed = [&](const std::vector<std::string>& models) {
      return models.empty() || std::find(models.begin(), models.end(), model) != models.end();
    };
    if (caller && caller->models_claimed && std::find(caller->models.begin(), caller->models.end(), model) == caller->models.end())
      return false;
    return (!key || listed(key->models)) && (!tenant || listed(tenant->models));
  }
  bool restricted() const {
    return (key && !key->models.empty()) || (tenant && !tenant->models.empty()) || (caller && caller->models_claimed);
  }
};


struct RequestContext {
  ConfigPtr config;  // the snapshot this request started with
  unsigned worker_id = 0;
  std::string request_id;
  // The request's place in a distributed trace, like request_id an identity every
  // record of it carries (access log, usage record, upstream headers). Set by the
  // tracing filter; invalid (all zero) when tracing is off.
  TraceContext trace;
  Endpoint endpoint = Endpoint::None;
  std::string_view method;
  std::string_view path;
  std::string_view query;  // after '?', undecoded
  // The client's request headers, for request phases: once a stream's response starts
  // they are freed (a held stream does not keep them) and this is null.
  const HeaderView* headers = nullptr;
  std::string body;  // as received; the router may rewrite the model name
  // An upload's spooled body (request/upload.h); ctx.body then holds its text fields as
  // a JSON object. Null for every other request.
  const struct Upload* upload = nullptr;
  std::uint64_t bytes_in = 0;

  // Set by the auth filter.
  Principal principal;

  // Set by the router filter.
  RequestFacts facts;
  const ModelConfig* model = nullptr;
  std::string_view route_name;  // the declarative route that chose the model, if any
  const RouteConfig* route = nullptr;
  // Set by the balancer filter.
  const DeploymentConfig* deployment = nullptr;
  const ProviderConfig* provider = nullptr;
  DeploymentState* deployment_state = nullptr;  // this worker's view of it
  std::string_view route_reason;                // canary decision: pin, allow, sticky, percent, none, single
  std::vector<std::size_t> tried;               // DeploymentConfig::index of failed attempts
  const ModelConfig* requested_model = nullptr; // before any fallback
  std::string_view fallback;                    // "model" when a fallback model answered,
                                                // "response" for the configured fallback answer,
                                                // "cache" for a kept answer (the response cache),
                                                // "shift" when a self-healing rule sent it there

  // Response side.
  int status = 0;
  bool streaming = false;  // the response is an event stream
  std::uint64_t bytes_out = 0;
  std::uint64_t chunks_out = 0;
  int attempts = 0;  // upstream tries (retries + 1)
  // While onResponseHeaders runs (null otherwise): the headers the client will get
  // besides the gateway's own framing: the upstream's (translated), or, for an answer
  // the gateway gives itself (an error, a local reply), none at first. Filters may
  // change, drop or add entries (a value that is not a literal lives in their State).
  std::vector<std::pair<std::string_view, std::string_view>>* response_headers = nullptr;
  // While onAnswer runs (null otherwise): the whole non-streamed answer, translated for
  // the client, before any of it was sent.
  const std::string* answer = nullptr;
  double upstream_retry_after = 0;  // seconds, from the upstream's Retry-After
  Usage usage;
  std::optional<Error> error;  // the gateway's own error, if any
  std::optional<LocalReply> local_reply;

  // Views into the config snapshot or a filter's State (see RecordField).
  std::array<std::string_view, static_cast<std::size_t>(RecordField::Count)> record_fields{};

  // Every filter's per-request State, in one block the session owns (FilterChain::begin).
  std::byte* filter_state = nullptr;
  // Lets a filter that paused the request resume it (set by the session).
  Resumer* resumer = nullptr;

  SteadyTime start{};
  std::optional<SteadyTime> first_byte;  // first response byte written to the client
  SteadyTime end{};

  // Short-circuits the request with an error in the inbound API's shape.
  void fail(Error e) { error = std::move(e); }
  // Nothing of a provider's answer reached the client (an error event a stream ends with
  // is the gateway's), or the answer is the gateway's own fallback: nothing is billed.
  // The usage record and the limits' calibration both ask this, so they agree.
  bool nothingBilled() const { return !first_byte || fallback == "response"; }
  // The error as a response body in the client's API shape.
  std::string errorBody(const Error& e) const {
    if (endpoint == Endpoint::Mcp) return e.toJsonRpc();
    return apiFamily(endpoint) == ApiFamily::Anthropic ? e.toAnthropicJson() : e.toJson();
  }
};

}  // namespace tahua
