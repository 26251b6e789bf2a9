#include "core/error.h"

#include <boost/json.hpp>

namespace tahua {

int Error::httpStatus() const {
  switch (kind) {
    case ErrorKind::InvalidJson:
    case ErrorKind::InvalidRequest:
    case ErrorKind::MissingModel:
    case ErrorKind::InvalidPrompt:
    case ErrorKind::PreviousResponseNotFound:
    case ErrorKind::ItemNotFound:
    case ErrorKind::ContentBlocked:
    case ErrorKind::BadHttp: return 400;
    case ErrorKind::ModelNotFound:
    case ErrorKind::PromptNotFound:
    case ErrorKind::ResponseNotFound:
    case ErrorKind::FileNotFound:
    case ErrorKind::UnknownPath: return 404;
    case ErrorKind::MethodNotAllowed: return 405;
    case ErrorKind::ClientTooSlow: return 408;  // only logged: the stream's head was already sent
    case ErrorKind::ConcurrencyLimited:
    case ErrorKind::RateLimited:
    case ErrorKind::LimitTooSmall:
    case ErrorKind::QuotaExceeded: return 429;
    case ErrorKind::MissingApiKey:
    case ErrorKind::InvalidApiKey: return 401;
    case ErrorKind::ModelNotAllowed: return 403;
    case ErrorKind::IdempotencyInProgress:
    case ErrorKind::IdempotencyNotKept: return 409;
    case ErrorKind::IdempotencyKeyReused: return 422;
    case ErrorKind::BodyTooLarge: return 413;
    case ErrorKind::HeadersTooLarge: return 431;
    case ErrorKind::UriTooLong: return 414;
    case ErrorKind::ProviderUnavailable:
    case ErrorKind::Overloaded:
    case ErrorKind::CircuitOpen:
    case ErrorKind::Draining: return 503;
    case ErrorKind::UpstreamConnect:
    case ErrorKind::UpstreamTls:
    case ErrorKind::UpstreamBadResponse:
    case ErrorKind::UpstreamInterrupted:
    case ErrorKind::UpstreamTruncated:
    case ErrorKind::UpstreamEventTooLarge: return 502;
    case ErrorKind::UpstreamTimeout: return 504;
    case ErrorKind::PluginDenied: return plugin_status >= 400 && plugin_status <= 499 ? plugin_status : 403;
    case ErrorKind::PluginFailed:
    case ErrorKind::StoreUnavailable:
    case ErrorKind::GuardrailUnavailable: return 503;
    case ErrorKind::ResponseQualityLow: return 502;
    case ErrorKind::Internal: return 500;
  }
  return 500;
}

ErrorSource Error::source() const {
  switch (kind) {
    case ErrorKind::InvalidJson:
    case ErrorKind::InvalidRequest:
    case ErrorKind::MissingModel:
    case ErrorKind::ModelNotFound:
    case ErrorKind::UnknownPath:
    case ErrorKind::MethodNotAllowed:
    case ErrorKind::BodyTooLarge:
    case ErrorKind::HeadersTooLarge:
    case ErrorKind::UriTooLong:
    case ErrorKind::ClientTooSlow:
    case ErrorKind::MissingApiKey:
    case ErrorKind::InvalidApiKey:
    case ErrorKind::ModelNotAllowed:
    case ErrorKind::IdempotencyInProgress:
    case ErrorKind::IdempotencyKeyReused:
    case ErrorKind::IdempotencyNotKept:
    case ErrorKind::PluginDenied:
    case ErrorKind::PromptNotFound:
    case ErrorKind::InvalidPrompt:
    case ErrorKind::ResponseNotFound:
    case ErrorKind::FileNotFound:
    case ErrorKind::PreviousResponseNotFound:
    case ErrorKind::ItemNotFound:
    case ErrorKind::ContentBlocked:
    case ErrorKind::BadHttp: return ErrorSource::Client;
    case ErrorKind::UpstreamConnect:
    case ErrorKind::UpstreamTls:
    case ErrorKind::UpstreamTimeout:
    case ErrorKind::UpstreamBadResponse:
    case ErrorKind::UpstreamInterrupted:
    case ErrorKind::UpstreamTruncated:
    case ErrorKind::UpstreamEventTooLarge: return ErrorSource::Upstream;
    default: return ErrorSource::Gateway;
  }
}

// Only a connection that never carried the request: a TLS failure would fail again, and
// anything after the request was sent may have been processed (and billed) upstream.
bool Error::retryable() const { return kind == ErrorKind::UpstreamConnect; }

std::string_view Error::type() const {
  if (kind == ErrorKind::ConcurrencyLimited || kind == ErrorKind::RateLimited || kind == ErrorKind::LimitTooSmall)
    return "rate_limit_error";  // what SDKs retry on (status 429 is what they check)
  if (kind == ErrorKind::QuotaExceeded) return "insufficient_quota";  // OpenAI's type and code for it
  switch (source()) {
    case ErrorSource::Client: return "invalid_request_error";
    case ErrorSource::Upstream: return "upstream_error";
    case ErrorSource::Gateway: return "server_error";
  }
  return "server_error";
}

std::string_view Error::code() const {
  switch (kind) {
    case ErrorKind::InvalidJson: return "invalid_json";
    case ErrorKind::InvalidRequest: return "invalid_request";
    case ErrorKind::MissingModel: return "missing_model";
    case ErrorKind::ModelNotFound: return "model_not_found";
    case ErrorKind::UnknownPath: return "unknown_url";
    case ErrorKind::MethodNotAllowed: return "method_not_allowed";
    case ErrorKind::BodyTooLarge: return "request_too_large";
    case ErrorKind::HeadersTooLarge: return "headers_too_large";
    case ErrorKind::UriTooLong: return "uri_too_long";
    case ErrorKind::BadHttp: return "bad_request";
    case ErrorKind::ProviderUnavailable: return "provider_unavailable";
    case ErrorKind::UpstreamConnect: return "upstream_unreachable";
    case ErrorKind::UpstreamTls: return "upstream_tls_error";
    case ErrorKind::UpstreamTimeout: return "upstream_timeout";
    case ErrorKind::UpstreamBadResponse: return "upstream_bad_response";
    case ErrorKind::UpstreamInterrupted: return "upstream_stream_interrupted";
    case ErrorKind::UpstreamTruncated: return "upstream_stream_truncated";
    case ErrorKind::UpstreamEventTooLarge: return "upstream_event_too_large";
    case ErrorKind::Draining: return "gateway_draining";
    case ErrorKind::Overloaded: return "gateway_overloaded";
    case ErrorKind::ConcurrencyLimited: return "concurrency_limit_exceeded";
    case ErrorKind::MissingApiKey: return "missing_api_key";
    case ErrorKind::InvalidApiKey: return "invalid_api_key";
    case ErrorKind::ModelNotAllowed: return "model_not_allowed";
    case ErrorKind::RateLimited: return "rate_limit_exceeded";
    case ErrorKind::LimitTooSmall: return "request_exceeds_limit";
    case ErrorKind::QuotaExceeded: return "insufficient_quota";
    case ErrorKind::IdempotencyInProgress: return "idempotency_in_progress";
    case ErrorKind::IdempotencyKeyReused: return "idempotency_key_reused";
    case ErrorKind::IdempotencyNotKept: return "idempotency_answer_not_kept";
    case ErrorKind::CircuitOpen: return "circuit_open";
    case ErrorKind::ClientTooSlow: return "stream_buffer_overflow";
    case ErrorKind::PluginDenied: return plugin_code.empty() ? std::string_view("plugin_denied") : std::string_view(plugin_code);
    case ErrorKind::PluginFailed: return "plugin_failed";
    case ErrorKind::PromptNotFound: return "prompt_not_found";
    case ErrorKind::InvalidPrompt: return "invalid_prompt";
    case ErrorKind::ResponseNotFound: return "response_not_found";
    case ErrorKind::FileNotFound: return "file_not_found";
    case ErrorKind::PreviousResponseNotFound: return "previous_response_not_found";
    case ErrorKind::ItemNotFound: return "item_not_found";
    case ErrorKind::StoreUnavailable: return "store_unavailable";
    case ErrorKind::ContentBlocked: return "content_blocked";
    case ErrorKind::GuardrailUnavailable: return "guardrail_unavailable";
    case ErrorKind::ResponseQualityLow: return "response_quality_low";
    case ErrorKind::Internal: return "internal_error";
  }
  return "internal_error";
}

std::string Error::toJson() const {
  boost::json::object inner;
  inner["message"] = message;
  inner["type"] = type();
  if (param.empty()) inner["param"] = nullptr;
  else inner["param"] = param;
  inner["code"] = code();
  boost::json::object outer;
  outer["error"] = std::move(inner);
  return boost::json::serialize(outer);
}

std::string Error::toOpenAIStreamEvent() const {
  if (kind != ErrorKind::Draining) return "data: " + toJson() + "\n\n";
  std::string body = toJson();
  body.insert(body.size() - 1, ",\"reconnect\":true");
  return "event: reconnect\ndata: " + body + "\n\n";
}

std::string Error::toAnthropicJson() const {
  std::string_view t;
  switch (httpStatus()) {
    case 400: t = "invalid_request_error"; break;
    case 401: t = "authentication_error"; break;
    case 403: t = "permission_error"; break;
    case 404: t = "not_found_error"; break;
    case 413: t = "request_too_large"; break;
    case 429: t = "rate_limit_error"; break;
    case 503: t = "overloaded_error"; break;
    default: t = httpStatus() < 500 ? "invalid_request_error" : "api_error";
  }
  boost::json::object inner;
  inner["type"] = t;
  inner["message"] = message;
  boost::json::object outer;
  outer["type"] = "error";
  outer["error"] = std::move(inner);
  return boost::json::serialize(outer);
}

std::string Error::toJsonRpc() const {
  boost::json::object data;
  data["type"] = type();
  data["code"] = code();
  data["status"] = httpStatus();
  boost::json::object inner;
  inner["code"] = -32000;  // JSON-RPC's "server error" range: what the MCP SDKs send for a refused request
  inner["message"] = message;
  inner["data"] = std::move(data);
  boost::json::object outer;
  outer["jsonrpc"] = "2.0";
  outer["id"] = nullptr;  // refused before (or without) reading the message
  outer["error"] = std::move(inner);
  return boost::json::serialize(outer);
}

}  // namespace tahua
