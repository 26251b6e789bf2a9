// Per-request state, owned by the session for one request and dropped at its end.
// Filters read and write it; nothing here depends on Asio or Beast, so a filter is a
// small translation unit that compiles fast and can be unit-tested without sockets.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "core/error.h"
#include "http/request_inspect.h"

namespace tahua {

enum class Endpoint { None, ChatCompletions, Completions, Embeddings, Models };

std::string_view endpointPath(Endpoint e);  // "/chat/completions" etc., relative to base_url

// Read access to the inbound request headers (case-insensitive names).
class HeaderView {
 public:
  virtual ~HeaderView() = default;
  virtual std::string_view get(std::string_view name) const = 0;
};

struct Usage {
  std::int64_t prompt_tokens = -1;  // -1: not reported
  std::int64_t completion_tokens = -1;
  std::int64_t total_tokens = -1;
  bool present() const { return prompt_tokens >= 0 || completion_tokens >= 0 || total_tokens >= 0; }
};

// A response the gateway makes itself (short-circuit), e.g. /v1/models.
struct LocalReply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

using SteadyTime = std::chrono::steady_clock::time_point;

struct RequestContext {
  ConfigPtr config;  // the snapshot this request started with
  unsigned worker_id = 0;
  std::string request_id;
  Endpoint endpoint = Endpoint::None;
  std::string_view method;
  std::string_view path;
  const HeaderView* headers = nullptr;
  std::string body;  // as received; the router may rewrite the model name
  std::uint64_t bytes_in = 0;

  // Set by the router filter.
  RequestFacts facts;
  const ModelConfig* model = nullptr;
  const ProviderConfig* provider = nullptr;
  bool bulkhead_admitted = false;  // counted by the bulkhead filter; released in onComplete
  bool breaker_admitted = false;   // the circuit breaker judges this call's outcome
  bool breaker_probe = false;      // ... as a half-open probe

  // Response side.
  int status = 0;
  bool streaming = false;  // the response is an event stream
  std::uint64_t bytes_out = 0;
  std::uint64_t chunks_out = 0;
  int attempts = 0;  // upstream tries (retries + 1)
  Usage usage;
  std::optional<Error> error;  // the gateway's own error, if any
  std::optional<LocalReply> local_reply;

  SteadyTime start{};
  std::optional<SteadyTime> first_byte;  // first response byte written to the client
  SteadyTime end{};

  // Short-circuits the request with an error in the inbound API's shape.
  void fail(Error e) { error = std::move(e); }
};

}  // namespace tahua
