// The Realtime API (GET /v1/realtime?model=..., a WebSocket): after the filter chain
// admitted the session and chose the deployment, the relay opens the provider's
// WebSocket (OpenAI's /v1/realtime?model=, Azure's /openai/realtime?deployment=) with the
// provider's credentials, and only then accepts the client's upgrade: a refusal before
// that (a bad key, a limit, an upstream that says no) is an HTTP answer. Frames then go
// both ways as they come, one at a time, never gathered. Each `response.done` event's
// usage is added to the request's; the rate-limit filter may end a session over its
// budget (an `error` event, then a close). Idle and total time are bounded
// (server.realtime), and a drain closes the session with a close frame that says why.
//
// The relay is its own translation unit (Beast's WebSocket is heavy), instantiated for
// the session's two stream types.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>

#include "core/error.h"
#include "request/request_context.h"
#include "server/request_body.h"

namespace tahua {

class FilterChain;
struct ProviderRuntime;
struct UpstreamEnv;

// What the relay needs from the client connection.
class RealtimeHost {
 public:
  // Answers ctx.error over HTTP (no upgrade happened).
  virtual boost::asio::awaitable<void> refuse(RequestContext& ctx) = 0;
  // `close(reason)` ends the session with a close frame (a drain); cleared with nullptr.
  virtual void onCloseRequest(std::function<void(std::string_view reason)> close) = 0;
  virtual FilterChain& chain() = 0;
  virtual std::string_view requestId() const = 0;

 protected:
  ~RealtimeHost() = default;
};

template <class Stream>
boost::asio::awaitable<void> relayRealtime(Stream& client, const boost::beast::http::request<RequestBody>& request,
                                           RequestContext& ctx, const ProviderRuntime& provider, UpstreamEnv& env,
                                           RealtimeHost& host);

// The usage of a `response.done` event ({"response":{"usage":{...}}}), added to `usage`.
// False when the text is not one.
bool addRealtimeUsage(std::string_view event, Usage& usage);

}  // namespace tahua
