// One error type for everything the gateway itself reports. It carries what the
// client needs (HTTP status, OpenAI `type`/`code`, a safe message) and what operators
// need (kind, source, retryable). No exceptions cross the data path: functions return
// this by value or inside a Result.
#pragma once

#include <string>
#include <string_view>

namespace tahua {

enum class ErrorSource { Client, Upstream, Gateway };

enum class ErrorKind {
  InvalidJson,          // body is not JSON / not an object
  InvalidRequest,       // a field has the wrong type
  MissingModel,
  ModelNotFound,
  UnknownPath,
  MethodNotAllowed,
  BodyTooLarge,
  HeadersTooLarge,
  UriTooLong,           // request target over server.max_url_bytes
  BadHttp,              // malformed HTTP framing; the connection is closed after it
  ProviderUnavailable,  // provider not usable (e.g. its key is not configured)
  UpstreamConnect,      // refused, unreachable, DNS failure
  UpstreamTls,          // handshake or certificate verification failed
  UpstreamTimeout,      // connect, first byte, idle or total timeout
  UpstreamBadResponse,  // unparseable or oversized upstream response
  UpstreamInterrupted,  // upstream failed after the response began
  UpstreamTruncated,    // a stream ended cleanly but before the vendor's end marker
  UpstreamEventTooLarge,  // a stream event (or line) longer than server.max_stream_event_bytes
  Draining,             // gateway shutting down
  Overloaded,           // the gateway itself is out of a resource (file descriptors)
  ConcurrencyLimited,   // over a configured concurrency cap (bulkhead)
  MissingApiKey,        // auth is on and the request carries no key
  InvalidApiKey,        // unknown, revoked or expired key
  ModelNotAllowed,      // the key (or its tenant) may not use the model
  RateLimited,          // over a request or token rate limit (Retry-After says when)
  LimitTooSmall,        // the request alone needs more than a limit's whole capacity: never passes
  QuotaExceeded,        // a token quota or money budget of the period is used up
  IdempotencyInProgress,  // the same Idempotency-Key is being answered right now
  IdempotencyKeyReused,   // the Idempotency-Key was used for a different request
  IdempotencyNotKept,     // the key's answer was too large to keep: not run again
  CircuitOpen,          // the provider's circuit breaker is open: failing fast
  ClientTooSlow,        // a stream's client fell further behind than server.stream_buffer_bytes
  PluginDenied,         // a Lua plugin refused the request (its status and code)
  PluginFailed,         // a fail-closed plugin failed (error, budget) or its breaker is open
  PromptNotFound,       // a request named a prompt template (or version) that does not exist
  InvalidPrompt,        // its `prompt` object or variables are wrong (missing, ill-typed, unknown)
  ResponseNotFound,     // GET/DELETE of a stored response the caller has not (never, expired, another tenant's)
  FileNotFound,         // a file or batch id the caller's tenant does not own (never, expired, another tenant's)
  PreviousResponseNotFound,  // previous_response_id names a response tahua issued and no longer has
  ItemNotFound,         // an item_reference names an item tahua issued and no longer has
  StoreUnavailable,     // the state store cannot answer a lookup the request needs (Redis away)
  ContentBlocked,       // a guardrail rule with action `block` matched (the request, or a stream's answer)
  GuardrailUnavailable, // a fail-closed external guardrail (moderation endpoint) gave no verdict in time
  ResponseQualityLow,   // the answer-quality check refused the answer (and the fallback's, if one was tried)
  Internal,
};

struct Error {
  ErrorKind kind = ErrorKind::Internal;
  std::string message;  // safe for clients: never contains secrets or internals
  int retry_after_seconds = 0;  // > 0: answered with a Retry-After header
  // Which limit an UpstreamTimeout hit: "connect", "first_byte", "idle" or "total"
  // (a string literal; metrics and the access log label timeouts by it).
  const char* timeout_kind = nullptr;
  // PluginDenied: the status (4xx) and code the plugin chose ("" : plugin_denied).
  int plugin_status = 0;
  std::string plugin_code = {};
  // The request field an InvalidRequest names (OpenAI's error `param`); empty: null.
  std::string param = {};

  int httpStatus() const;
  ErrorSource source() const;
  bool retryable() const;  // safe to try again: the upstream never got the request
  std::string_view type() const;  // OpenAI error `type`
  std::string_view code() const;  // OpenAI error `code`, stable for clients and tests

  // {"error":{"message":...,"type":...,"param":null,"code":...}}
  std::string toJson() const;
  // Anthropic's shape: {"type":"error","error":{"type":...,"message":...}}
  std::string toAnthropicJson() const;
  // MCP's (JSON-RPC 2.0): {"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":...,
  // "data":{"type":...,"code":...,"status":...}}}: a refusal of /mcp (a key, a limit).
  std::string toJsonRpc() const;
  // The last event of an OpenAI-format stream the gateway ends itself. At the drain
  // deadline it is the documented reconnect event:
  //   event: reconnect
  //   data: {"error":{..."code":"gateway_draining"},"reconnect":true}
  // (SDKs that ignore event names still see the error); otherwise "data: {error}".
  std::string toOpenAIStreamEvent() const;
};

}  // namespace tahua
