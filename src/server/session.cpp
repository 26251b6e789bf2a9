// One client connection: reads requests (keep-alive, pipelining), runs each through
// the filter chain and the upstream exchange, and writes the answer. Streams are
// relayed piece by piece as they arrive; nothing is buffered beyond one read.
//
// This room holds the connection and what it reads: the keep-alive loop, one request
// read and served, its head (with the checks Beast's parser would let pass), its body
// into memory or an upload's spool, drain, shutdown and the lingering close after a body
// refused unread. The rest of the request's life is in the rooms session_impl.h lists.
#include "server/session.h"

#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>

#include "core/log.h"
#include "core/temp_file.h"
#include "server/session_impl.h"
#include "telemetry/metrics.h"

namespace tahua {

namespace {

// The path of the request line at the start of `head` ("POST /v1/files?x HTTP/1.1"),
// before Beast parses it: an upload's body limit is the path's, and Beast checks a
// declared Content-Length against the limit while it parses the head.
std::string_view requestLinePath(std::string_view head) {
  const std::size_t start = head.find(' ');
  if (start == std::string_view::npos) return {};
  const std::size_t end = head.find_first_of(" ?\r\n", start + 1);
  return head.substr(start + 1, end == std::string_view::npos ? std::string_view::npos : end - start - 1);
}

}  // namespace

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
  if (realtime_close_) realtime_close_(kDrainCloseReason);  // a drain: a close frame says why
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
  // The parser's flags, set as it read the Connection header (the message's keep_alive()
  // would look the header up again and parse its tokens: ~700 instructions).
  keep_alive_ = parser.keep_alive() && !worker_.draining();
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

// Reads head and body (an upload's head only: its body is read after the header
// filters ran, receiveBody). On failure returns the error to answer with, or an
// Internal error meaning "just close" (slow or vanished clients get no answer).
template <class Stream>
asio::awaitable<std::optional<Error>> Session<Stream>::readRequest(http::request_parser<RequestBody>& parser) {
  const ServerConfig& cfg = serverConfig();
  deadline_.after(cfg.header_timeout);
  {
    std::size_t scanned = 0;
    std::optional<Error> bad;
    if (!checkHead(cfg, scanned, bad)) bad = co_await readWholeHead(cfg);
    if (bad) co_return bad;
  }
  // An upload's limit is its path's (server.uploads.max_bytes).
  body_limit_ = cfg.max_body_bytes;
  upload_ = false;
  if (!admin_) {
    // Only a POST to an upload path: every other request pays one prefix compare.
    const std::string_view line(static_cast<const char*>(buffer_.data().data()), std::min<std::size_t>(buffer_.size(), cfg.max_url_bytes + 32));
    if (line.starts_with("POST /v1/")) {
      const std::string_view path = requestLinePath(line);
      if (path == "/v1/audio/transcriptions" || path == "/v1/audio/translations" || path == "/v1/images/edits" ||
          path == "/v1/files") {
        upload_ = true;
        body_limit_ = cfg.uploads.limitFor(path);
      }
    }
  }
  parser.body_limit(body_limit_);
  // The whole head is in buffer_ (checked above): Beast parses it from there, with no
  // asynchronous read (which would post its completion through the event loop).
  beast::error_code hec;
  buffer_.consume(parser.put(buffer_.data(), hec));
  if (!hec && !parser.is_header_done()) hec = http::error::partial_message;
  if (hec == http::error::header_limit) co_return Error{ErrorKind::HeadersTooLarge, "Request headers are too large."};
  // A declared Content-Length over the limit is refused before any body is read.
  if (hec == http::error::body_limit) co_return tooLarge();
  if (hec) co_return Error{ErrorKind::BadHttp, "Malformed HTTP request."};
  auto& head = parser.get();
  // One pass by the fields' enums (a lookup by name walks Beast's ordered set, ~300
  // instructions each). Only "chunked" is a body framing we accept, in every
  // Transfer-Encoding field; anything else could be read differently by another hop
  // (request smuggling).
  std::size_t hosts = 0;
  bool other_framing = false;
  for (const auto& field : head) {
    if (field.name() == http::field::host) ++hosts;
    else if (field.name() == http::field::transfer_encoding && !field.value().empty() && !beast::iequals(field.value(), "chunked"))
      other_framing = true;
  }
  if (other_framing) co_return Error{ErrorKind::BadHttp, "Unsupported Transfer-Encoding."};
  if (head.target().empty() || head.target().front() != '/')
    co_return Error{ErrorKind::BadHttp, "The request target must be an absolute path."};
  if (head.target().size() > cfg.max_url_bytes) co_return uriTooLong(cfg);
  // RFC 9112 3.2: an HTTP/1.1 request has exactly one Host; no request has two.
  if (hosts > 1 || (hosts == 0 && head.version() >= 11))
    co_return Error{ErrorKind::BadHttp, hosts > 1 ? "The request has more than one Host header." : "The request has no Host header."};
  if (parser.is_done() || upload_) co_return std::nullopt;
  co_return co_await readBody(parser, cfg.body_timeout);
}

template <class Stream>
Error Session<Stream>::tooLarge() const {
  return Error{ErrorKind::BodyTooLarge, "Request body is larger than " + std::to_string(body_limit_) + " bytes."};
}

// The body after the head: into memory, or to the body's sink when it has one.
template <class Stream>
asio::awaitable<std::optional<Error>> Session<Stream>::readBody(http::request_parser<RequestBody>& parser, Millis timeout) {
  const ServerConfig& cfg = serverConfig();
  const auto quiet = [](beast::error_code ec) {
    return ec == http::error::end_of_stream || ec == asio::error::eof ||
           ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
           ec == asio::error::bad_descriptor;
  };
  if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    deadline_.after(cfg.client_write_timeout);
    auto [cec, cn] = co_await asio::async_write(stream_, asio::buffer(kContinue), kUseTuple);
    if (cec) co_return Error{ErrorKind::Internal, {}};
  }
  const BodySink* sink = parser.get().body().sink;
  if (auto len = parser.content_length(); len && *len <= body_limit_ && !sink) {
    // Room for the whole body in the read buffer: a large prompt arrives in a few
    // big reads instead of many 512-byte ones.
    buffer_.reserve(buffer_.size() + static_cast<std::size_t>(*len));
  } else if (sink) {
    // An upload goes through the buffer 64 KiB at a time: Beast reads what the
    // buffer has room for (at the idle buffer's 1 KiB, a 50 MB upload took 50,000
    // reads and as many trips through epoll).
    buffer_.reserve(buffer_.size() + kUploadReadBytes);
  }
  // Body bytes that came with the head are parsed from buffer_ too; only the rest is read.
  if (buffer_.size() > 0) {
    parser.eager(true);
    beast::error_code pec;
    buffer_.consume(parser.put(buffer_.data(), pec));
    if (pec == http::error::body_limit) co_return tooLarge();
    if (pec && sink && spool_->failure()) co_return *spool_->failure();
    if (pec && pec != http::error::need_more) co_return Error{ErrorKind::BadHttp, "Malformed HTTP request body."};
    if (parser.is_done()) co_return std::nullopt;
  }
  deadline_.after(timeout);
  auto [bec, bn] = co_await http::async_read(stream_, buffer_, parser, kUseTuple);
  if (bec == http::error::body_limit) co_return tooLarge();
  if (bec && sink && spool_->failure()) co_return *spool_->failure();
  if (bec && quiet(bec)) co_return Error{ErrorKind::Internal, {}};
  if (bec) co_return Error{ErrorKind::BadHttp, "Malformed HTTP request body."};
  co_return std::nullopt;
}

template <class Stream>
Error Session<Stream>::uriTooLong(const ServerConfig& cfg) {
  return Error{ErrorKind::UriTooLong, "The request URL is longer than " + std::to_string(cfg.max_url_bytes) + " bytes."};
}

// Reads until the whole request head is in buffer_, and checks what Beast's parser
// would accept silently: obs-fold (a header line continued on the next, which RFC 9112
// 5.2 says a server must reject or replace; other hops may read it differently) and a
// request line longer than the URL bound (414 rather than the headers' 431). The usual
// head arrived whole with the first read: that costs no coroutine (checkHead).
template <class Stream>
asio::awaitable<std::optional<Error>> Session<Stream>::readWholeHead(const ServerConfig& cfg) {
  std::size_t scanned = 0;  // bytes already searched for the end of the head
  for (;;) {
    std::optional<Error> bad;
    if (checkHead(cfg, scanned, bad)) co_return bad;
    auto [ec, n] = co_await stream_.async_read_some(buffer_.prepare(4096), kUseTuple);
    if (ec) co_return Error{ErrorKind::Internal, {}};  // closed or timed out mid-head: nothing to answer
    buffer_.commit(n);
  }
}

// True when buffer_ holds the whole head (`bad` says what is wrong with it, if
// anything) or it is already wrong; false when more must be read. `scanned`: bytes
// already searched for the end of the head.
template <class Stream>
bool Session<Stream>::checkHead(const ServerConfig& cfg, std::size_t& scanned, std::optional<Error>& bad) {
  const std::string_view data(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  const std::size_t from = scanned > 3 ? scanned - 3 : 0;
  std::size_t end = data.find("\r\n\r\n", from);
  if (end == std::string_view::npos) end = data.find("\n\n", from);  // bare LF: Beast refuses it
  const std::size_t line_end = data.find('\n');
  if ((line_end == std::string_view::npos ? data.size() : line_end) > cfg.max_url_bytes + 32) {
    bad = uriTooLong(cfg);
    return true;
  }
  if (end != std::string_view::npos) {
    for (std::size_t i = data.find('\n'); i != std::string_view::npos && i < end; i = data.find('\n', i + 1))
      if (data[i + 1] == ' ' || data[i + 1] == '\t') {
        bad = Error{ErrorKind::BadHttp, "A header line continues on the next line (obs-fold), which is not allowed."};
        return true;
      }
    return true;
  }
  if (data.size() > cfg.max_header_bytes) {
    bad = Error{ErrorKind::HeadersTooLarge, "Request headers are too large."};
    return true;
  }
  scanned = data.size();
  return false;
}

// AttemptHost: reads the upload's body into its spool, now that the header filters let
// it through, and gives the filters its text fields as the body (request/upload.h).
template <class Stream>
asio::awaitable<std::optional<Error>> Session<Stream>::receiveBody(RequestContext& ctx) {
  http::request_parser<RequestBody>& parser = *upload_parser_;
  const UploadConfig& cfg = serverConfig().uploads;
  const auto boundary = formBoundary(parser.get()[http::field::content_type]);
  if (!boundary)
    co_return Error{ErrorKind::InvalidRequest,
                    "The " + std::string(ctx.path) + " endpoint takes a multipart/form-data body (Content-Type with a boundary)."};
  MultipartScanner::Limits limits;
  limits.max_text_bytes = cfg.max_text_bytes;
  spool_.emplace(*boundary, limits);
  const std::string dir = spoolDirectory(cfg.spool_dir);
  if (auto why = spool_->open(dir)) {
    log::error("cannot make an upload's spool file", {{"dir", dir}, {"error", *why}});
    co_return Error{ErrorKind::Overloaded, "The gateway could not store the upload; please retry shortly."};
  }
  parser.get().body().sink = &*spool_;
  if (!parser.is_done()) {
    std::optional<Error> bad = co_await readBody(parser, cfg.timeout);
    deadline_.never();
    if (bad) {
      // The rest of the body is unread: the connection ends with the answer.
      if (bad->kind == ErrorKind::Internal) client_gone_ = true;
      co_return bad;
    }
  }
  if (auto bad = spool_->finish(ctx.body)) co_return bad;
  ctx.upload = &spool_->upload();
  ctx.bytes_in = spool_->upload().size;
  keep_alive_ = upload_keep_alive_ && !worker_.draining();
  co_return std::nullopt;
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

// After an answer given before the body was read: the answer is out (and, on plain TCP,
// our FIN after it); what the client still sends is read and discarded, bounded in
// time and bytes, so that closing with unread bytes does not reset the connection
// (a reset can reach the client's stack before the answer it already has).
template <class Stream>
asio::awaitable<void> Session<Stream>::lingeringClose() {
  linger_ = false;
  const ServerConfig& cfg = serverConfig();
  beast::error_code ec;
  if constexpr (!kTls) lowest().shutdown(tcp::socket::shutdown_send, ec);
  thread_local std::array<char, 64 * 1024> discard;  // never read: every session may share it
  const auto end = Clock::now() + cfg.lingering_time;
  std::uint64_t bytes = 0;
  std::size_t why = 0;  // eof, time, timeout, bytes
  for (;;) {
    const auto now = Clock::now();
    if (now >= end) {
      why = 1;
      break;
    }
    deadline_.at(std::min(end, now + cfg.lingering_timeout));
    auto [rec, n] = co_await stream_.async_read_some(asio::buffer(discard), kUseTuple);
    bytes += n;
    if (rec) {
      why = !deadline_.expired() ? 0 : Clock::now() >= end ? 1 : 2;
      break;
    }
    if (bytes >= cfg.lingering_max_bytes) {
      why = 3;
      break;
    }
  }
  deadline_.never();
  ++worker_.metrics().lingering_closes[why];
  worker_.metrics().lingering_bytes += bytes;
}

#define TAHUA_SESSION_CONNECTION(S)                                                                                 \
  template asio::awaitable<void> Session<S>::run();                                                                 \
  template void Session<S>::closeIfIdle();                                                                          \
  template void Session<S>::abortForDrain();                                                                        \
  template asio::awaitable<bool> Session<S>::readAndServe();                                                        \
  template asio::awaitable<void> Session<S>::shutdown();                                                            \
  template asio::awaitable<std::optional<Error>> Session<S>::readRequest(http::request_parser<RequestBody>&);       \
  template Error Session<S>::tooLarge() const;                                                                      \
  template asio::awaitable<std::optional<Error>> Session<S>::readBody(http::request_parser<RequestBody>&, Millis);  \
  template Error Session<S>::uriTooLong(const ServerConfig&);                                                       \
  template asio::awaitable<std::optional<Error>> Session<S>::readWholeHead(const ServerConfig&);                    \
  template bool Session<S>::checkHead(const ServerConfig&, std::size_t&, std::optional<Error>&);                    \
  template asio::awaitable<std::optional<Error>> Session<S>::receiveBody(RequestContext&);                          \
  template asio::awaitable<void> Session<S>::lingeringClose();
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
