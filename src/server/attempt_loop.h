// The proxy attempt loop: a request's filter phases, then its upstream attempts, to the
// one answer the client gets (docs/life-of-a-request.md). An upstream call that fails
// before anything reached the client may be tried again (the provider's retry policy;
// on another deployment of the model when there is one), then on the model's fallback
// models in order, and when all of that failed the model's configured fallback answer is
// sent. Once the host's relay() has started there is no way back: never a retry after
// the first byte, never double billing.
//
// The loop knows nothing of sockets: the connection it serves is an AttemptHost, so it
// is unit-tested with a fake host and fake adapters (tests/unit/attempt_loop_test.cpp).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "filters/filter.h"
#include "providers/snapshot.h"

namespace tahua {

struct UpstreamEnv;
struct WorkerMetrics;

// What the loop needs from the client connection it answers.
class AttemptHost {
 public:
  virtual ~AttemptHost() = default;
  // The client hung up (or a write to it failed).
  virtual bool clientGone() const = 0;
  // The exchange in flight (null between attempts): a client hang-up aborts it at once,
  // and so does the drain deadline. The first call starts watching the client.
  virtual void watchClient(UpstreamExchange* exchange) = 0;
  virtual void stopWatching() = 0;
  // The request's body is still to be read (an upload: read after the header filters
  // let it through, so a refused key never makes the gateway take 50 MB).
  virtual bool bodyPending() const { return false; }
  // Reads it (ctx.body, ctx.upload); an error to answer with if it could not be.
  virtual boost::asio::awaitable<std::optional<Error>> receiveBody(RequestContext&) { co_return std::nullopt; }
  // A Realtime session (a WebSocket) on the chosen deployment: relayed to its end, or
  // refused over HTTP (server/realtime_relay.h).
  virtual boost::asio::awaitable<void> relayRealtime(RequestContext&, const ProviderRuntime&) { co_return; }
  // Waits between attempts; false if the wait was cut short.
  virtual boost::asio::awaitable<bool> sleepFor(Millis wait) = 0;
  // A request phase a filter paused: waits for each resume (FilterChain::run from `next`).
  virtual boost::asio::awaitable<FilterStatus> finishPausedPhase(RequestPhase phase, RequestContext& ctx,
                                                                 std::size_t next) = 0;
  // Writes ctx.local_reply, or ctx.error in the client's API shape.
  virtual boost::asio::awaitable<void> answerLocally(RequestContext& ctx) = 0;
  // Writes an answer the gateway made (the configured fallback), marked with
  // X-Tahua-Fallback: `reason`.
  virtual boost::asio::awaitable<void> answerFallback(RequestContext& ctx, int status, std::string_view content_type,
                                                      std::string_view body, std::string_view reason) = 0;
  // Reads a non-streamed answer whole and translates it for the client (the head is
  // accepted: ctx.status is set), writing nothing: for a filter to judge it (onAnswer).
  // An error if the body could not be read.
  virtual boost::asio::awaitable<std::optional<Error>> readAnswer(RequestContext& ctx, UpstreamExchange& exchange,
                                                                  ResponseTranslator& translator, ResponseHead& head,
                                                                  std::string& body) = 0;
  // Sends what readAnswer read (the headers' and body's filters run first).
  virtual boost::asio::awaitable<void> relayAnswer(RequestContext& ctx, ResponseHead& head, std::string& body) = 0;
  // Relays the attempt's answer (or writes `failure` as an error): the point of no return.
  // `failure` by reference: a by-value argument would be a second copy in the caller's
  // coroutine frame (136 bytes, which took run()'s frame past Asio's recycling).
  virtual boost::asio::awaitable<void> relay(RequestContext& ctx, UpstreamExchange& exchange,
                                             ResponseTranslator& translator, ResponseHead& head,
                                             std::optional<Error>& failure) = 0;
};

// The worker-side things the loop uses.
struct AttemptEnv {
  const Snapshot& snapshot;
  FilterChain& chain;
  UpstreamEnv& upstream;
  WorkerMetrics& metrics;
};

// Runs the request to its answer and then the chain's onComplete (exactly once).
boost::asio::awaitable<void> runAttempts(RequestContext& ctx, AttemptEnv env, AttemptHost& host);

}  // namespace tahua
