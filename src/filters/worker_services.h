// What a filter may ask of its worker's event loop, without Asio in the filter: hand a
// call over to the worker's thread, and run something after a delay. A filter that
// pauses a request uses these to resume it (see Resumer in filter.h).
#pragma once

#include <functional>
#include <memory>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/duration.h"
#include "http/outbound_call.h"
#include "request/request_context.h"

namespace tahua {

// A pending delayed call; destroying or cancelling it guarantees it will not run.
class TimerHandle {
 public:
  virtual ~TimerHandle() = default;
  virtual void cancel() = 0;
};

class WorkerServices {
 public:
  virtual ~WorkerServices() = default;
  // Runs `fn` on this worker's thread soon. Safe to call from any thread.
  virtual void post(std::function<void()> fn) = 0;
  // Runs `fn` on this worker's thread after `delay`, unless the handle is cancelled or
  // destroyed first. Call from the worker's thread.
  virtual std::unique_ptr<TimerHandle> runAfter(Millis delay, std::function<void()> fn) = 0;
  // Makes an HTTP call from this worker's loop, through its outbound client and that
  // client's pool of kept-alive connections (net/http_client.h); `done` runs on this
  // worker's thread, once, never before fetch returned. Call from the worker's thread.
  virtual void fetch(OutboundRequest request, std::function<void(OutboundResponse)> done) = 0;
  // A request of the gateway's own to one of its models (the embeddings of the semantic
  // cache and of the guardrails' quality check) or to an MCP server (filters/mcp/):
  // encoded by the target's first deployment's provider adapter as a client's request to
  // `endpoint` with `body` would be, and sent through the worker's upstream client (its
  // connection pool, the provider's timeouts, TLS, proxy and credentials), within
  // `timeout`. `done` runs on this worker's thread, once, never before callModel
  // returned, with the upstream's status, headers and body as it sent them (status 0:
  // `error` says why). Call from the worker's thread. Harnesses without upstreams keep
  // the default: no answer (status 0), at once.
  struct ModelCall {
    std::string model;  // a model's name, or an MCP server's target ("mcp:<server>")
    Endpoint endpoint = Endpoint::None;
    std::string method = "POST";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;  // added to the adapter's
    Millis timeout{10'000};
    std::size_t max_response_bytes = 4u << 20;
  };
  virtual void callModel(ModelCall call, std::function<void(OutboundResponse)> done) {
    OutboundResponse none;
    none.error = "no upstreams here";
    done(std::move(none));
  }
  void callModel(std::string_view model, Endpoint endpoint, std::string body, Millis timeout,
                 std::function<void(OutboundResponse)> done) {
    ModelCall call;
    call.model = std::string(model);
    call.endpoint = endpoint;
    call.body = std::move(body);
    call.timeout = timeout;
    callModel(std::move(call), std::move(done));
  }
};

}  // namespace tahua
