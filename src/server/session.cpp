// One client connection: reads requests (keep-alive, pipelining), runs each through
// the filter chain and the upstream exchange, and writes the answer. Streams are
// relayed piece by piece as they arrive; nothing is buffered beyond one read.
//
// This room holds the connection's life: the keep-alive loop, one request read and
// served, drain and shutdown. The rest of the request's life is in the rooms that
// session_impl.h lists.
#include "server/session.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ssl.hpp>

#include "server/session_impl.h"
#include "telemetry/metrics.h"

namespace tahua {

template <class Stream>
asio::awaitable<void> Session<Stream>::run() {
  beast::error_code ec;
  lowest().set_option(tcp::no_delay(true), ec);
  if constexpr (kTls) {
    deadline_.after(worker_.snapshot()->config->server.header_timeout);
    auto [hec] = co_await stream_.async_handshake(asio::ssl::stream_base::server, kUseTuple);
    if (hec) co_return;  // bad or slow TLS client: nothing to answer in HTTP
  }
  for (;;) {
    if (worker_.draining()) break;
    idle_ = true;
    if (buffer_.size() == 0) {
      // An idle connection does not keep a large request's buffer.
      if (buffer_.capacity() > 64 * 1024) buffer_.shrink_to_fit();
      // Keep-alive idle: wait for the first byte of the next request.
      deadline_.after(worker_.snapshot()->config->server.keepalive_timeout);
      auto [rec, n] = co_await stream_.async_read_some(buffer_.prepare(1024), kUseTuple);
      if (rec) break;  // closed, reset, idle timeout or drain: all end the connection quietly
      buffer_.commit(n);
    }
    idle_ = false;
    const bool keep = co_await readAndServe();
    if (!keep) break;
  }
  co_await shutdown();
}

template <class Stream>
void Session<Stream>::closeIfIdle() {
  if (realtime_close_) realtime_close_("The gateway is shutting down.");  // a drain: a close frame says why
  if (!idle_) return;
  beast::error_code ignored;
  lowest().close(ignored);
}

template <class Stream>
void Session<Stream>::abortForDrain() {
  if (exchange_) exchange_->abort();
  else if (idle_) closeIfIdle();
}

// Reads one request and answers it. Returns whether the connection stays open.
// (Mind the GCC 12 note in session_impl.h: named locals as co_await arguments.)
template <class Stream>
asio::awaitable<bool> Session<Stream>::readAndServe() {
  // Pin the config and filter chain for this request (a reload may publish new ones).
  snapshot_ = worker_.snapshot();
  chain_ = worker_.chain();
  const ServerConfig& cfg = serverConfig();
  http::request_parser<RequestBody> parser;
  parser.header_limit(static_cast<std::uint32_t>(cfg.max_header_bytes));
  const auto received = Clock::now();

  linger_ = false;
  std::optional<Error> bad = co_await readRequest(parser);
  if (bad) {
    if (bad->kind != ErrorKind::Internal) {
      co_await replyBadInput(*bad);
      // Refused with its body unread (over its limit): the client may still be sending.
      linger_ = !deadline_.expired() && (bad->kind == ErrorKind::BodyTooLarge || (parser.is_header_done() && !parser.is_done()));
    }
    co_return false;
  }
  deadline_.never();  // the upstream's own time limits apply until the answer is written
  http::request<RequestBody>& req = parser.get();  // not released: one message in this frame
  keep_alive_ = req.keep_alive() && !worker_.draining();
  http10_ = req.version() == 10;
  if (upload_) {
    // Its body is still in the socket: read once the header filters let it through
    // (receiveBody); the connection closes after an answer given before that.
    upload_parser_ = &parser;
    upload_keep_alive_ = keep_alive_;
    keep_alive_ = false;
  }
  co_await serve(req, received);
  // An upload answered before its body was read (a refused key, no files provider).
  if (upload_ && !parser.is_done() && !clientGone()) linger_ = true;
  upload_parser_ = nullptr;
  spool_.reset();
  co_return keep_alive_ && !clientGone() && !worker_.draining();
}

template <class Stream>
asio::awaitable<void> Session<Stream>::shutdown() {
  beast::error_code ec;
  if (linger_) co_await lingeringClose();
  if constexpr (kTls) {
    deadline_.after(std::chrono::seconds(1));
    co_await stream_.async_shutdown(kUseTuple);
  }
  lowest().shutdown(tcp::socket::shutdown_send, ec);
  lowest().close(ec);
}

#define TAHUA_SESSION_CONNECTION(S)                            \
  template asio::awaitable<void> Session<S>::run();            \
  template void Session<S>::closeIfIdle();                     \
  template void Session<S>::abortForDrain();                   \
  template asio::awaitable<bool> Session<S>::readAndServe();   \
  template asio::awaitable<void> Session<S>::shutdown();
TAHUA_SESSION_CONNECTION(PlainStream)
TAHUA_SESSION_CONNECTION(TlsStream)
#undef TAHUA_SESSION_CONNECTION

namespace {

// `tls` keeps the server TLS context alive as long as a session uses it, even after
// its listener closed during a drain.
template <class Stream>
asio::awaitable<void> runSession(SessionHost& worker, Stream stream, std::shared_ptr<asio::ssl::context> tls, bool admin) {
  Session<Stream> session(worker, std::move(stream), admin);
  worker.registerSession(&session, admin);
  ++worker.metrics().active_connections;
  ++worker.metrics().connections_accepted;
  co_await session.run();
  --worker.metrics().active_connections;
  worker.unregisterSession(&session, admin);
}

}  // namespace

void startSession(SessionHost& worker, tcp::socket socket, std::shared_ptr<asio::ssl::context> tls, bool admin) {
  auto& io = worker.io();
  if (tls) {
    asio::ssl::stream<tcp::socket> stream(std::move(socket), *tls);
    asio::co_spawn(io, runSession(worker, std::move(stream), tls, admin), asio::detached);
  } else {
    asio::co_spawn(io, runSession(worker, std::move(socket), nullptr, admin), asio::detached);
  }
}

}  // namespace tahua
