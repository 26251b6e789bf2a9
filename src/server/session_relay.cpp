// Answering from upstream: the relay of a whole body or of a stream (the pump, its
// bound on a slow client, heartbeats, the end of a cut stream), the answer-end hold,
// the heads and writes every answer goes out with, and the upgrade path (a Realtime
// session handed to its relay, realtime_relay.h). Members of Session (session_impl.h).
#include <array>
#include <charconv>

#include <boost/asio/write.hpp>

#include "core/log.h"
#include "http/query.h"
#include "providers/translation.h"
#include "server/session_impl.h"
#include "server/upstream_client.h"
#include "telemetry/metrics.h"

namespace tahua {

// AttemptHost: the answer goes to the client; from here on nothing is retried.
template <class Stream>
asio::awaitable<void> Session<Stream>::relay(RequestContext& ctx, UpstreamExchange& exchange, ResponseTranslator& translator,
                                            ResponseHead& head, std::optional<Error>& failure) {
  if (failure) {
    if (clientGone()) co_return;
    recordUpstreamFailure(ctx, std::move(*failure));
    co_await writeError(ctx);
    co_return;
  }
  acceptHead(ctx, translator, head);
  ctx.response_headers = &head.headers;
  chain_->responseHeaders(ctx);
  ctx.response_headers = nullptr;  // the views die with the exchange
  if (!ctx.streaming) {
    co_await relayBody(ctx, exchange, translator, head);
    co_return;
  }
  // A stream, relayed piece by piece as it arrives, in this same coroutine frame (a
  // held stream keeps its whole chain of frames). The upstream is read on while the
  // client catches up (the stream writer queues what the socket does not take), up to
  // server.stream_buffer_bytes: a client further behind than that has its stream ended
  // with a stream_buffer_overflow event (at an event boundary, so it stays well-formed)
  // and the upstream cancelled, instead of holding memory or the upstream.
  //
  // A stream that ends early (upstream failure, an error the translator found, the
  // buffer bound) still ends with a complete chunked body, so the connection stays
  // usable for the client's next request: the head promised keep-alive.
  //
  // HTTP/1.0 has no chunked encoding: the stream is the body, ended by closing.
  if (http10_) keep_alive_ = false;
  HeadWriter h = beginHead(head.status);
  // A stream's caching and buffering headers are ours (the upstream's would be a
  // second, possibly conflicting, copy).
  for (auto& [name, value] : head.headers)
    if (!beast::iequals(name, "cache-control") && !beast::iequals(name, "x-accel-buffering")) h.header(name, value);
  deploymentHeaders(h, ctx);
  h.header("Content-Type", head.content_type);
  h.header("Cache-Control", "no-cache");
  h.header("X-Accel-Buffering", "no");
  if (!http10_) h.header("Transfer-Encoding", "chunked");
  h.end();
  // From here on the worker's heartbeat sweep may write comments (heartbeatTick).
  writer_.begin(http10_, serverConfig().client_write_timeout);
  // Body that came with the upstream's head goes out in the same write as our head;
  // otherwise the head goes now (the client sees the status before the first token).
  writer_.holdHead(head_);
  if (!exchange.bodyBuffered() && !writer_.sendHead()) {  // the client is gone; the exchange is aborted
    writer_.end();
    co_return;
  }
  // A stream may last minutes: give back the read buffer if it holds no pipelined
  // request (reallocated for the next request on this connection: one allocation per
  // stream, against memory held for its life), the client's request headers (filters
  // read them in request phases only) and the upstream's response head. Ours goes once
  // it is written.
  if (buffer_.size() == 0) buffer_.shrink_to_fit();
  ctx.headers = nullptr;
  if (request_fields_) request_fields_->clear();
  exchange.releaseHead();
  // The pump.
  const std::size_t limit = serverConfig().stream_buffer_bytes;
  // Waiting for an event boundary is bounded by the longest event an upstream may send.
  const std::size_t hard_limit = limit + serverConfig().max_stream_event_bytes + 64 * 1024;
  bool end_released = false;
  for (;;) {
    std::string_view bytes;
    bool done = false;
    auto err = co_await exchange.read(bytes, done);
    if (err) {
      if (clientGone()) break;
      // Never a silent truncation: the client learns why its stream ended.
      recordUpstreamFailure(ctx, std::move(*err));
      endStreamWithError(ctx, translator);
      break;
    }
    std::string_view out;
    bool answer_ends = false;  // this piece releases the end of the answer
    if (!bytes.empty() || done) {
      out = translator.onStreamBytes(bytes, done, ctx);
      answer_ends = done || translator.streamEnded();
      if (chain_->wantsResponseData()) {
        // Filters may rewrite the piece, hold part of it back, or end the stream; one may
        // hold the stream while a check of its runs (what it gave so far goes out).
        ResponseData data(out, answer_ends);
        std::size_t waiter = chain_->responseData(ctx, data);
        bool written = true;
        bool end_held = data.endHeld();
        while (data.waiting() && waiter != static_cast<std::size_t>(-1)) {
          if (end_held && !end_released) {
            // What goes out now carries the answer's end: its holders go first.
            end_released = true;
            if (chain_->holdsAnswerEnds()) co_await holdAnswerEnd(ctx);
          }
          if (!(written = sendStreamPiece(ctx, data.bytes(), false))) break;
          co_await awaitResume();
          data = ResponseData::resumedAfter(data);
          waiter = chain_->responseData(ctx, data, waiter);
          end_held = end_held || data.endHeld();
        }
        if (!written) {
          exchange.abort();
          break;
        }
        out = data.bytes();
        answer_ends = answer_ends || end_held;
        if (data.failed()) {
          ctx.fail(data.takeFailure());
          filter_ended_.assign(out);
          filter_ended_ += translator.streamErrorEvent(*ctx.error);
          out = filter_ended_;
          exchange.abort();
          done = true;
          answer_ends = false;  // a cut stream is no answer to rely on
        }
      }
    }
    if (answer_ends && !end_released) {
      // Nothing is read or written meanwhile: `out` stays as the filters left it.
      end_released = true;
      if (chain_->holdsAnswerEnds()) co_await holdAnswerEnd(ctx);
    }
    if (translator.streamEnded()) {
      // The translator closed the stream with an error event (a vendor error inside
      // the stream, a truncated or malformed one): nothing more comes from upstream.
      exchange.abort();
      done = true;
    }
    // The last piece and the terminating chunk go out together.
    if (!sendStreamPiece(ctx, out, done)) {
      exchange.abort();
      break;
    }
    if (writer_.holdingHead() && !writer_.sendHead()) {
      exchange.abort();
      break;
    }
    if (head_.capacity() > 0) std::string().swap(head_);  // written (or copied to the backlog)
    if (done) break;
    // Past the bound the stream ends at the next event boundary (an event is small; a
    // stream that has none in sight is cut at twice the bound).
    const std::size_t backlog = writer_.backlog();
    if (backlog > limit && (translator.atEventBoundary() || backlog > hard_limit)) {
      exchange.abort();
      ++worker_.metrics().stream_buffer_overflows;
      ctx.fail(Error{ErrorKind::ClientTooSlow, "The client read the stream too slowly; the gateway ended it."});
      log::warn("stream buffer overflow", {{"request_id", ctx.request_id}, {"backlog_bytes", std::to_string(backlog)}});
      endStreamWithError(ctx, translator);
      break;
    }
  }
  co_await writer_.flush();  // no write of this stream may outlive the relay
  writer_.end();

}

// A piece of a stream to the client (and its end, when `done`); false: the client is gone.
template <class Stream>
bool Session<Stream>::sendStreamPiece(RequestContext& ctx, std::string_view out, bool done) {
  if (out.empty() && !done) return true;
  if (!writer_.sendChunk(out, done)) return false;
  if (!out.empty()) {
    if (!ctx.first_byte) ctx.first_byte = writer_.lastWrite();
    ctx.bytes_out += out.size();
    ++ctx.chunks_out;
  }
  return true;
}

// The worker calls this for every session on a coarse timer (one timer per worker,
// not per stream: a held stream costs memory); the writer decides (see heartbeat()).
// Only a session relaying a stream has a pinned snapshot to read the interval from (a
// connection that has not sent its request yet has none).
template <class Stream>
void Session<Stream>::heartbeatTick(Clock::time_point now) {
  // A comment line would corrupt audio: bytes relayed as they come get none.
  if (writer_.active() && !raw_stream_) writer_.heartbeat(now, serverConfig().stream_heartbeat);
}

// The translator's error event for ctx.error, then the end of the body. The event
// starts on a fresh line: an unfinished line or event before it is closed first (a
// parser then sees the error, not one long line). A held-back possible start of a
// secret is dropped.
template <class Stream>
void Session<Stream>::endStreamWithError(RequestContext& ctx, ResponseTranslator& translator) {
  if (raw_stream_) {
    // Bytes have no error event: the body stays unterminated and the connection is
    // closed, which every HTTP client reports as a cut answer.
    keep_alive_ = false;
    return;
  }
  if (chain_->wantsResponseData()) {
    ResponseData end({}, true);  // filters drop what they hold back
    end.setAborted();
    chain_->responseData(ctx, end);
  }
  std::string event = translator.atEventBoundary() ? std::string() : std::string("\n\n");
  event += translator.streamErrorEvent(*ctx.error);
  if (writer_.sendChunk(event, true)) ctx.bytes_out += event.size();
}

// StreamWriterOwner: a write failed (the client reset, or did not read for
// client_write_timeout): the upstream is cancelled at once.
template <class Stream>
void Session<Stream>::streamWriteFailed() {
  client_gone_ = true;
  if (exchange_) exchange_->abort();
}

// The upstream's head, accepted: the translator sees it, and the request its status.
template <class Stream>
void Session<Stream>::acceptHead(RequestContext& ctx, ResponseTranslator& translator, ResponseHead& head) {
  translator.onResponseHead(head, ctx);
  ctx.status = head.status;
  ctx.streaming = head.event_stream || head.raw_stream;
  raw_stream_ = head.raw_stream;
  for (const auto& [name, value] : head.headers)
    if (beast::iequals(name, "retry-after")) {
      unsigned seconds = 0;
      if (std::from_chars(value.data(), value.data() + value.size(), seconds).ec == std::errc{}) ctx.upstream_retry_after = seconds;
    }
}

// A non-streamed body to the client: read whole (bounded by server.max_response_bytes),
// translated, through the body filters, written with its head in one go.
template <class Stream>
asio::awaitable<void> Session<Stream>::relayBody(RequestContext& ctx, UpstreamExchange& exchange,
                                                ResponseTranslator& translator, ResponseHead& head) {
  std::string body;
  for (;;) {
    std::string_view bytes;
    bool done = false;
    auto err = co_await exchange.read(bytes, done);
    if (!err) err = takePiece(exchange, body, bytes, done);
    if (err) {
      if (clientGone()) co_return;
      recordUpstreamFailure(ctx, std::move(*err));
      co_await writeError(ctx, true);
      co_return;
    }
    if (done) break;
  }
  translator.onBody(body, ctx);  // may re-shape the body and its status (translated errors)
  headForBody(ctx, head, body);
  if (chain_->holdsAnswerEnds()) co_await holdAnswerEnd(ctx);
  co_await writeHeadAnd(body);
}

// The answer-end phase (Filter::onAnswerEnd): filters that must finish something
// before the client has the whole answer may pause it here. Called only when the chain
// has such filters (a coroutine's frame is an allocation even when it does nothing).
template <class Stream>
asio::awaitable<void> Session<Stream>::holdAnswerEnd(RequestContext& ctx) {
  std::size_t next = 0;
  if (chain_->run(RequestPhase::End, ctx, next) == FilterStatus::Pause)
    co_await finishPausedPhase(RequestPhase::End, ctx, next);
}

// Appends a piece of a body; an error past server.max_response_bytes.
template <class Stream>
std::optional<Error> Session<Stream>::takePiece(UpstreamExchange& exchange, std::string& body, std::string_view bytes,
                                                bool done) {
  if (body.size() + bytes.size() > serverConfig().max_response_bytes) {
    exchange.abort();
    return Error{ErrorKind::UpstreamBadResponse, "The upstream response is larger than the gateway accepts."};
  }
  if (body.empty() && done) body.reserve(bytes.size() + 64);  // single piece: one allocation, padded for simdjson
  body.append(bytes);
  return std::nullopt;
}

// AttemptHost: an answer read whole before anything was sent (a filter judged it).
template <class Stream>
asio::awaitable<std::optional<Error>> Session<Stream>::readAnswer(RequestContext& ctx, UpstreamExchange& exchange,
                                                                 ResponseTranslator& translator, ResponseHead& head,
                                                                 std::string& body) {
  acceptHead(ctx, translator, head);
  for (;;) {
    std::string_view bytes;
    bool done = false;
    auto err = co_await exchange.read(bytes, done);
    if (!err) err = takePiece(exchange, body, bytes, done);
    if (err) co_return err;
    if (done) break;
  }
  translator.onBody(body, ctx);
  co_return std::nullopt;
}

// AttemptHost: sends what readAnswer read, through the headers' and body's filters.
template <class Stream>
asio::awaitable<void> Session<Stream>::relayAnswer(RequestContext& ctx, ResponseHead& head, std::string& body) {
  ctx.response_headers = &head.headers;
  chain_->responseHeaders(ctx);
  ctx.response_headers = nullptr;
  headForBody(ctx, head, body);
  if (chain_->holdsAnswerEnds()) co_await holdAnswerEnd(ctx);
  co_await writeHeadAnd(body);
}

// A whole body's head, after the body filters (the caller writes it with the body).
template <class Stream>
void Session<Stream>::headForBody(RequestContext& ctx, ResponseHead& head, std::string& body) {
  ctx.response_headers = &head.headers;  // a filter may add headers from what the body says
  chain_->responseBody(ctx, body);
  ctx.response_headers = nullptr;
  HeadWriter h = beginHead(ctx.status);
  for (auto& [name, value] : head.headers) h.header(name, value);
  deploymentHeaders(h, ctx);
  // A body the translator replaced with the gateway's own error is JSON whatever the upstream said.
  if (ctx.error) h.header("Content-Type", "application/json");
  else if (!head.content_type.empty()) h.header("Content-Type", head.content_type);
  h.contentLength(body.size());
  h.end();
  ctx.bytes_out = body.size();
  ctx.first_byte = Clock::now();
}

// An exchange aborted by the drain deadline reports the drain, not a broken upstream.
template <class Stream>
void Session<Stream>::recordUpstreamFailure(RequestContext& ctx, Error&& err) {
  if (worker_.drainDeadlinePassed())
    ctx.fail(Error{ErrorKind::Draining, "The gateway is shutting down; please retry the request."});
  else
    ctx.fail(std::move(err));
}

// Which deployment answered, for verifying a canary's share from outside
// (server.deployment_header; off by default).
template <class Stream>
void Session<Stream>::deploymentHeaders(HeadWriter& h, const RequestContext& ctx) {
  // With fallbacks configured the answer names the model that gave it.
  if (ctx.requested_model && !ctx.requested_model->fallback_indices.empty() && ctx.model)
    h.header("X-Tahua-Model", ctx.model->name);
  if (!serverConfig().deployment_header || !ctx.deployment) return;
  h.header("X-Tahua-Deployment", ctx.deployment->id);
  h.header("X-Tahua-Version", ctx.deployment->version);
}

// Status line and the headers every response carries; the caller adds the rest.
template <class Stream>
HeadWriter Session<Stream>::beginHead(int status) {
  HeadWriter h(head_);
  h.statusLine(status);
  h.header("Server", "tahua");
  h.header("x-request-id", request_id_);
  if (!keep_alive_) h.header("Connection", "close");
  else if (http10_) h.header("Connection", "keep-alive");
  return h;
}

// head_ and then `body`, in one gathered write.
template <class Stream>
asio::awaitable<bool> Session<Stream>::writeHeadAnd(std::string_view body) {
  std::array<asio::const_buffer, 2> bufs{asio::buffer(head_), asio::buffer(body.data(), body.size())};
  deadline_.after(serverConfig().client_write_timeout);
  auto [ec, n] = co_await asio::async_write(
      stream_, std::span<const asio::const_buffer>(bufs.data(), body.empty() || head_only_ ? 1 : 2), kUseTuple);
  if (ec) client_gone_ = true;
  co_return !ec;
}

// An answer the gateway gives itself passes the filters' onResponseHeaders too (a
// refusal carries the rate-limit headers): what they add goes out with it.
template <class Stream>
void Session<Stream>::filterHeaders(RequestContext& ctx, HeaderList& added, ExtraHeaders& extra) {
  ctx.response_headers = &added;
  chain_->responseHeaders(ctx);
  ctx.response_headers = nullptr;
  extra.added = added;
}

template <class Stream>
asio::awaitable<void> Session<Stream>::writeSimple(int status, std::string_view content_type, std::string_view body,
                                                  ExtraHeaders extra) {
  HeadWriter h = beginHead(status);
  h.header("Content-Type", content_type);
  if (!extra.allow.empty()) h.header("Allow", extra.allow);
  if (!extra.retry_after.empty()) h.header("Retry-After", extra.retry_after);
  if (!extra.fallback.empty()) h.header("X-Tahua-Fallback", extra.fallback);
  for (const auto& [name, value] : extra.added) h.header(name, value);
  h.contentLength(body.size());
  h.end();
  co_await writeHeadAnd(body);
}

// A Realtime request: a WebSocket upgrade naming a plain model; ctx.body becomes
// {"model":...,"stream":true} (a session streams).
template <class Stream>
std::optional<Error> Session<Stream>::realtimeBody(const http::request<RequestBody>& req, RequestContext& ctx) {
  if (!beast::iequals(req[http::field::upgrade], "websocket"))
    return Error{ErrorKind::InvalidRequest, "The /v1/realtime endpoint takes a WebSocket upgrade (Upgrade: websocket)."};
  const std::string_view model = queryParam(ctx.query, "model").value_or(std::string_view{});
  if (model.empty() || model.size() > 256 ||
      model.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@") != std::string_view::npos)
    return Error{ErrorKind::MissingModel, "The realtime session needs a model: /v1/realtime?model=<name>."};
  ctx.body.assign("{\"model\":\"").append(model).append("\",\"stream\":true}");
  return std::nullopt;
}

// AttemptHost: the chosen deployment's provider serves the session (OpenAI's kinds).
template <class Stream>
asio::awaitable<void> Session<Stream>::relayRealtime(RequestContext& ctx, const ProviderRuntime& provider) {
  const std::string& type = provider.config->type;
  if (type != "openai" && type != "azure-openai") {
    ctx.fail(Error{ErrorKind::InvalidRequest, "The /v1/realtime endpoint is not supported by provider type '" + type +
                                                  "' (model '" + ctx.facts.model + "')."});
    co_await writeError(ctx);
    co_return;
  }
  if (!provider.config->serves(ProviderApi::Realtime)) {
    ctx.fail(Error{ErrorKind::InvalidRequest, "The /v1/realtime endpoint is not served by provider '" + provider.config->name +
                                                  "' (model '" + ctx.facts.model + "'): its `apis` list does not name `realtime`."});
    co_await writeError(ctx);
    co_return;
  }
  co_await tahua::relayRealtime(stream_, *realtime_request_, ctx, provider, worker_.upstreamEnv(), *this);
  // The connection ends with the session (keep_alive_ is off since serve()).
}

// RealtimeHost.
template <class Stream>
asio::awaitable<void> Session<Stream>::refuse(RequestContext& ctx) {
  co_await writeError(ctx);
}

#define TAHUA_SESSION_RELAY(S)                                                                                         \
  template asio::awaitable<void> Session<S>::relay(RequestContext&, UpstreamExchange&, ResponseTranslator&, ResponseHead&, \
                                                   std::optional<Error>&);                                            \
  template void Session<S>::heartbeatTick(Clock::time_point);                                                         \
  template bool Session<S>::sendStreamPiece(RequestContext&, std::string_view, bool);                                 \
  template void Session<S>::endStreamWithError(RequestContext&, ResponseTranslator&);                                 \
  template void Session<S>::streamWriteFailed();                                                                      \
  template void Session<S>::acceptHead(RequestContext&, ResponseTranslator&, ResponseHead&);                          \
  template asio::awaitable<void> Session<S>::relayBody(RequestContext&, UpstreamExchange&, ResponseTranslator&,       \
                                                       ResponseHead&);                                                \
  template asio::awaitable<void> Session<S>::holdAnswerEnd(RequestContext&);                                          \
  template std::optional<Error> Session<S>::takePiece(UpstreamExchange&, std::string&, std::string_view, bool);       \
  template asio::awaitable<std::optional<Error>> Session<S>::readAnswer(RequestContext&, UpstreamExchange&,           \
                                                                        ResponseTranslator&, ResponseHead&, std::string&); \
  template asio::awaitable<void> Session<S>::relayAnswer(RequestContext&, ResponseHead&, std::string&);               \
  template void Session<S>::headForBody(RequestContext&, ResponseHead&, std::string&);                                \
  template void Session<S>::recordUpstreamFailure(RequestContext&, Error&&);                                          \
  template void Session<S>::deploymentHeaders(HeadWriter&, const RequestContext&);                                    \
  template HeadWriter Session<S>::beginHead(int);                                                                     \
  template asio::awaitable<bool> Session<S>::writeHeadAnd(std::string_view);                                          \
  template void Session<S>::filterHeaders(RequestContext&, HeaderList&, ExtraHeaders&);                               \
  template asio::awaitable<void> Session<S>::writeSimple(int, std::string_view, std::string_view, ExtraHeaders);    \
  template std::optional<Error> Session<S>::realtimeBody(const http::request<RequestBody>&, RequestContext&);        \
  template asio::awaitable<void> Session<S>::relayRealtime(RequestContext&, const ProviderRuntime&);               \
  template asio::awaitable<void> Session<S>::refuse(RequestContext&);
TAHUA_SESSION_RELAY(PlainStream)
TAHUA_SESSION_RELAY(TlsStream)
#undef TAHUA_SESSION_RELAY

}  // namespace tahua
