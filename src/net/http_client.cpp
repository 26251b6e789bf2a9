#include "net/http_client.h"

#include <openssl/ssl.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/span_body.hpp>
#include <boost/beast/http/write.hpp>
#include <array>
#include <charconv>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "net/deadline.h"
#include "net/socket_alive.h"

namespace tahua {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kPiece = 16 << 10;  // one body read at the most (a streamed piece)

// A connection, plain or TLS, and the one timer that keeps its limits.
struct Conn {
  explicit Conn(asio::io_context& io) : socket(io), deadline(socket) {}
  tcp::socket socket;  // moved into `tls` for https
  std::optional<ssl::stream<tcp::socket>> tls;
  Deadline deadline;
  beast::flat_buffer buffer;  // read but not parsed yet
  Clock::time_point idle_since{};

  tcp::socket& lowest() { return tls ? tls->next_layer() : socket; }
  void close() {
    boost::system::error_code ignored;
    lowest().close(ignored);
  }
};

// May an idle connection serve another call? Not when its peer closed it, nor when
// anything came that was not asked for: a TLS close_notify, mostly, which the TLS layer
// may already hold (read from the socket with the answer's last bytes) where the
// socket's peek cannot see it.
bool stillUsable(Conn& c) {
  if (c.tls) {
    SSL* ssl = c.tls->native_handle();
    if (SSL_pending(ssl) > 0 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0) return false;
  }
  return socketLooksAlive(c.lowest(), false);
}

Clock::time_point dueAfter(Clock::time_point from, Millis limit) {
  return limit.count() > 0 ? from + limit : Clock::time_point::max();
}

// "host:port" ("[::1]:port" for an IPv6 address): the pool's key and a CONNECT's target.
std::string hostPort(const HttpUrl& u) {
  return (u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host) + ":" + u.port;
}

// The Host header: the port only when it is not the scheme's.
std::string hostHeader(const HttpUrl& u) {
  std::string h = hostPort(u);
  if (u.port == (u.tls ? "443" : "80")) h.resize(h.size() - u.port.size() - 1);
  return h;
}

// Methods a reused connection's silent close may be retried for (RFC 9110 9.2.2).
bool idempotent(http::verb v) {
  return v == http::verb::get || v == http::verb::head || v == http::verb::options || v == http::verb::put ||
         v == http::verb::delete_;
}

enum class Outcome {
  Done,          // answered (the body read or streamed to its end)
  Stopped,       // on_body ended it
  Failed,        // out.error says why
  StaleSend,     // the request could not be sent (a reused connection the peer closed)
  StaleReceive,  // sent, and the peer closed without a byte of answer
};

struct Call;

// A client's state: its options, TLS context, pool and calls in flight. Shared by the
// calls, which may outlive the HttpClient.
struct Client : std::enable_shared_from_this<Client> {
  Client(asio::io_context& i, HttpClientOptions o) : io(i), options(std::move(o)), sweep(i) {
    boost::system::error_code ec;
    tls.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                    ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    if (!options.ca_file.empty()) {
      tls.load_verify_file(options.ca_file, ec);
      if (ec) setup_error = "ca_file " + options.ca_file + ": " + ec.message();
    } else if (!options.ca_pem.empty()) {
      tls.add_certificate_authority(asio::buffer(options.ca_pem), ec);
      if (ec) setup_error = "ca_pem: " + ec.message();
    } else {
      tls.set_default_verify_paths(ec);
      if (ec) setup_error = "the system's CAs: " + ec.message();
    }
    tls.set_verify_mode(ssl::verify_peer);
  }

  asio::io_context& io;
  HttpClientOptions options;
  ssl::context tls{ssl::context::tls_client};
  std::string setup_error;
  std::unordered_map<std::string, std::vector<std::unique_ptr<Conn>>> idle;  // per key, the last used last
  asio::steady_timer sweep;  // closes the idle connections that expired
  bool sweep_armed = false;
  bool closed = false;  // the HttpClient is gone: nothing is kept any more
  std::unordered_set<Call*> active;
  HttpClient::Counts counts;

  // A live idle connection for `key`, or null.
  std::unique_ptr<Conn> take(const std::string& key) {
    auto it = idle.find(key);
    if (it == idle.end()) return nullptr;
    const auto now = Clock::now();
    std::unique_ptr<Conn> found;
    auto& list = it->second;
    while (!list.empty() && !found) {
      std::unique_ptr<Conn> c = std::move(list.back());  // the most recently used
      list.pop_back();
      if (now - c->idle_since < options.idle_expiry && stillUsable(*c)) found = std::move(c);
    }
    if (list.empty()) idle.erase(it);
    return found;
  }

  // Keeps `c` for the next call to `key`, unless enough are kept (then it closes).
  void put(const std::string& key, std::unique_ptr<Conn> c) {
    if (closed || options.max_idle_per_host == 0) return;
    auto& list = idle[key];
    if (list.size() >= options.max_idle_per_host) return;
    c->idle_since = Clock::now();
    list.push_back(std::move(c));
    if (!sweep_armed) armSweep(Clock::now() + options.idle_expiry);
  }

  void armSweep(Clock::time_point when) {
    sweep_armed = true;
    sweep.expires_at(when);
    sweep.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self) return;
      self->sweep_armed = false;
      if (ec || self->closed) return;
      // Closes what expired; wakes again when the oldest of the rest does.
      const auto now = Clock::now();
      auto next = Clock::time_point::max();
      for (auto it = self->idle.begin(); it != self->idle.end();) {
        auto& list = it->second;
        std::erase_if(list, [&](const std::unique_ptr<Conn>& c) { return now - c->idle_since >= self->options.idle_expiry; });
        for (const auto& c : list) next = std::min(next, c->idle_since + self->options.idle_expiry);
        it = list.empty() ? self->idle.erase(it) : std::next(it);
      }
      if (next != Clock::time_point::max()) self->armSweep(next);
    });
  }

  void closeAll();
};

struct Call {
  Call(std::shared_ptr<Client> i, OutboundRequest r, std::function<void(OutboundResponse)> d, http::verb v)
      : impl(std::move(i)), request(std::move(r)), done(std::move(d)), verb(v),
        key((request.url.tls ? "https://" : "http://") + hostPort(request.url)) {
    const auto now = Clock::now();
    due = dueAfter(now, request.timeout);
    head_due = std::min(due, dueAfter(now, request.head_timeout));
    impl->active.insert(this);
  }
  ~Call() { impl->active.erase(this); }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  std::shared_ptr<Client> impl;
  OutboundRequest request;
  std::function<void(OutboundResponse)> done;
  http::verb verb;
  std::string key;  // the pool's: scheme://host:port
  Clock::time_point due;       // the whole call's deadline (max: none)
  Clock::time_point head_due;  // the head's
  std::optional<tcp::resolver> lookup;
  Conn* conn = nullptr;    // the connection in use
  bool cancelled = false;  // closeAll()
  bool idle_limit = false;  // the limit the connection keeps now is the idle one

  void abort() {
    cancelled = true;
    if (lookup) lookup->cancel();
    if (conn) conn->close();
  }

  // What a failed step says: a limit that passed, or closeAll(), closed the socket under it.
  std::string failure(const char* step, const boost::system::error_code& ec) const {
    if (cancelled) return "cancelled";
    if (conn && conn->deadline.expired()) return idle_limit ? "idle" : "timeout";
    return std::string(step) + ": " + ec.message();
  }
};

// A new connection for `c`: looked up (IP literals need not be), connected, through the
// proxy, TLS set up; null (out.error says why) on failure. c.conn is it meanwhile.
asio::awaitable<std::unique_ptr<Conn>> connect(Call& c, OutboundResponse& out) {
  Client& impl = *c.impl;
  const HttpUrl& u = c.request.url;
  const ProxySettings& proxy = impl.options.proxy;
  std::string host = u.host;
  std::string port = u.port;
  if (proxy.enabled) {
    host = proxy.host;
    port = std::to_string(proxy.port);
  }
  auto conn = std::make_unique<Conn>(impl.io);
  c.conn = conn.get();
  conn->deadline.at(c.head_due);
  tcp::resolver::results_type endpoints;
  boost::system::error_code ec;
  const auto literal = asio::ip::make_address(host, ec);
  unsigned short port_number = 0;
  const auto [end, pec] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (!ec && pec == std::errc() && end == port.data() + port.size()) {
    endpoints = tcp::resolver::results_type::create(tcp::endpoint(literal, port_number), host, port);
  } else {
    c.lookup.emplace(impl.io);
    conn->deadline.watchLookup(&*c.lookup);
    auto [rec, results] = co_await c.lookup->async_resolve(host, port, kTuple);
    conn->deadline.watchLookup(nullptr);
    if (rec) {
      out.error = c.failure("resolve", rec);
      co_return nullptr;
    }
    endpoints = std::move(results);
  }
  if (c.cancelled) {
    out.error = "cancelled";
    co_return nullptr;
  }
  auto [cec, ep] = co_await asio::async_connect(conn->socket, endpoints, kTuple);
  if (cec) {
    out.error = c.failure("connect", cec);
    co_return nullptr;
  }
  conn->socket.set_option(tcp::no_delay(true), ec);
  ++impl.counts.opened;
  if (proxy.enabled && u.tls) {
    // A tunnel to the host: CONNECT host:port, then TLS with the host through it.
    http::request<http::empty_body> req{http::verb::connect, hostPort(u), 11};
    req.set(http::field::host, hostPort(u));
    if (!proxy.authorization.empty()) req.set(http::field::proxy_authorization, proxy.authorization);
    auto [wec, wn] = co_await http::async_write(conn->socket, req, kTuple);
    if (wec) {
      out.error = c.failure("proxy", wec);
      co_return nullptr;
    }
    http::response_parser<http::empty_body> parser;
    parser.skip(true);  // a CONNECT answer has no body
    auto [rec, rn] = co_await http::async_read_header(conn->socket, conn->buffer, parser, kTuple);
    if (rec) {
      out.error = c.failure("proxy", rec);
      co_return nullptr;
    }
    if (parser.get().result_int() != 200 || conn->buffer.size() > 0) {
      out.error = "proxy: CONNECT answered " + std::to_string(parser.get().result_int());
      co_return nullptr;
    }
  }
  if (u.tls) {
    conn->tls.emplace(std::move(conn->socket), impl.tls);
    conn->deadline.watch(conn->tls->next_layer());
    // SNI for a name (not for an address); the certificate must name the URL's host.
    asio::ip::make_address(u.host, ec);
    if (ec) SSL_set_tlsext_host_name(conn->tls->native_handle(), u.host.c_str());
    conn->tls->set_verify_callback(ssl::host_name_verification(u.host));
    auto [hec] = co_await conn->tls->async_handshake(ssl::stream_base::client, kTuple);
    if (hec) {
      out.error = c.failure("tls", hec);
      co_return nullptr;
    }
  }
  co_return conn;
}

// Sends the request on `conn` and reads the answer: the head, then the body whole
// (bounded) or, streamed, piece by piece. `reusable`: the connection may serve another.
template <class Stream>
asio::awaitable<Outcome> exchange(Call& c, Conn& conn, Stream& stream, bool& reusable, OutboundResponse& out) {
  const Client& impl = *c.impl;
  const OutboundRequest& r = c.request;
  // Through a proxy, plain http names the whole URL in the request line.
  const bool absolute = impl.options.proxy.enabled && !r.url.tls;
  http::request<http::span_body<const char>> req{c.verb, absolute ? "http://" + hostHeader(r.url) + r.url.target : r.url.target, 11};
  req.set(http::field::host, hostHeader(r.url));
  req.set(http::field::user_agent, "tahua");
  if (absolute && !impl.options.proxy.authorization.empty())
    req.set(http::field::proxy_authorization, impl.options.proxy.authorization);
  for (const auto& [name, value] : r.headers) req.set(name, value);
  req.body() = beast::span<const char>(r.body.data(), r.body.size());  // kept for a retry
  req.prepare_payload();
  req.keep_alive(impl.options.max_idle_per_host > 0);

  conn.deadline.at(c.head_due);
  c.idle_limit = false;
  auto [wec, wn] = co_await http::async_write(stream, req, kTuple);
  if (wec) {
    out.error = c.failure("send", wec);
    co_return c.cancelled || conn.deadline.expired() ? Outcome::Failed : Outcome::StaleSend;
  }
  http::response_parser<http::buffer_body> parser;
  parser.header_limit(64 << 10);
  parser.body_limit(boost::none);  // bounded below (a stream is not)
  if (c.verb == http::verb::head) parser.skip(true);
  auto [hec, hn] = co_await http::async_read_header(stream, conn.buffer, parser, kTuple);
  if (hec) {
    // Closed before a byte of answer: the classic race with a server's keep-alive timeout.
    const bool stale = !c.cancelled && !conn.deadline.expired() && !parser.got_some() &&
                       (hec == http::error::end_of_stream || hec == asio::error::eof ||
                        hec == asio::error::connection_reset || hec == ssl::error::stream_truncated);
    out.error = c.failure("receive", hec);
    co_return stale ? Outcome::StaleReceive : Outcome::Failed;
  }
  out.status = static_cast<int>(parser.get().result_int());
  for (const auto& f : parser.get()) {
    std::string name(f.name_string());
    for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out.headers.emplace_back(std::move(name), std::string(f.value()));
  }
  const bool streamed = r.on_body && out.status >= 200 && out.status < 300;
  std::array<char, kPiece> piece;
  while (!parser.is_done()) {
    // The idle limit runs from each read; the whole call's from the start.
    const auto idle_due = dueAfter(Clock::now(), r.idle_timeout);
    c.idle_limit = idle_due < c.due;
    conn.deadline.at(std::min(c.due, idle_due));
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    // read_some: a piece is handed over when it arrives, not when the buffer is full.
    auto [rec, rn] = co_await http::async_read_some(stream, conn.buffer, parser, kTuple);
    if (rec && rec != http::error::need_buffer) {
      out.error = c.failure("receive", rec);
      if (!streamed) {  // no answer, not half of one
        out.status = 0;
        out.headers.clear();
        out.body.clear();
      }
      co_return Outcome::Failed;
    }
    const std::size_t got = piece.size() - parser.get().body().size;
    if (got == 0) continue;
    if (streamed) {
      if (!r.on_body(std::string_view(piece.data(), got))) co_return Outcome::Stopped;
      continue;
    }
    if (out.body.size() + got > r.max_response_bytes) {
      out = OutboundResponse{};
      out.error = "response too large";
      co_return Outcome::Failed;
    }
    out.body.append(piece.data(), got);
  }
  conn.deadline.never();
  reusable = parser.keep_alive() && conn.buffer.size() == 0;
  co_return Outcome::Done;
}

asio::awaitable<void> attempt(Call& c, OutboundResponse& out) {
  Client& impl = *c.impl;
  for (int round = 0;; ++round) {
    if (c.cancelled) {
      out.error = "cancelled";
      co_return;
    }
    std::unique_ptr<Conn> conn;
    if (round == 0) conn = impl.take(c.key);
    const bool reused = conn != nullptr;
    if (reused) {
      ++impl.counts.reused;
    } else {
      conn = co_await connect(c, out);
      if (!conn) {
        c.conn = nullptr;
        co_return;
      }
    }
    c.conn = conn.get();
    bool reusable = false;
    Outcome o;
    if (conn->tls) o = co_await exchange(c, *conn, *conn->tls, reusable, out);
    else o = co_await exchange(c, *conn, conn->socket, reusable, out);
    c.conn = nullptr;
    if (o == Outcome::Done && reusable && !c.cancelled) impl.put(c.key, std::move(conn));
    // A kept connection the peer closed as the request went out: once more on a new one,
    // when the server cannot have acted on it (not sent) or acting twice is harmless.
    const bool again = reused && round == 0 && !c.cancelled &&
                       (o == Outcome::StaleSend || (o == Outcome::StaleReceive && idempotent(c.verb)));
    if (!again) co_return;
    out = OutboundResponse{};
  }
}

asio::awaitable<void> run(std::unique_ptr<Call> c) {
  OutboundResponse out;
  try {
    co_await attempt(*c, out);
  } catch (const std::exception& e) {  // a header Beast refuses, an allocation: an answer, not a crash
    c->conn = nullptr;
    out = OutboundResponse{};
    out.error = std::string("request failed: ") + e.what();
  }
  if (c->cancelled) {  // whatever the closed connection's operation reported
    out = OutboundResponse{};
    out.error = "cancelled";
  }
  auto done = std::move(c->done);
  c.reset();  // no longer in flight when `done` runs (it may close the client)
  done(std::move(out));
}

void Client::closeAll() {
  for (Call* c : active) c->abort();
  idle.clear();
}

}  // namespace

struct HttpClient::Impl : Client {
  using Client::Client;
};

HttpClient::HttpClient(asio::io_context& io, HttpClientOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}

HttpClient::~HttpClient() {
  // Calls in flight keep the Impl until they end.
  impl_->closed = true;
  impl_->closeAll();
  impl_->sweep.cancel();
}

const std::string& HttpClient::setupError() const { return impl_->setup_error; }

void HttpClient::fetch(OutboundRequest request, std::function<void(OutboundResponse)> done) {
  const http::verb verb = http::string_to_verb(request.method);
  std::string refused = impl_->setup_error;
  if (refused.empty() && verb == http::verb::unknown) refused = "unknown method";
  if (!refused.empty()) {
    asio::post(impl_->io, [done = std::move(done), refused = std::move(refused)] {
      OutboundResponse r;
      r.error = refused;
      done(std::move(r));
    });
    return;
  }
  asio::co_spawn(impl_->io, run(std::make_unique<Call>(impl_, std::move(request), std::move(done), verb)), asio::detached);
}

void HttpClient::closeAll() { impl_->closeAll(); }

HttpClient::Counts HttpClient::counts() const {
  Counts n = impl_->counts;
  for (const auto& [key, list] : impl_->idle) n.idle += list.size();
  return n;
}

BlockingHttpClient::BlockingHttpClient(HttpClientOptions options)
    : io_(std::make_unique<asio::io_context>(1)), client_(std::make_unique<HttpClient>(*io_, std::move(options))) {}

BlockingHttpClient::~BlockingHttpClient() = default;  // the client first, then its io_context

OutboundResponse BlockingHttpClient::fetch(OutboundRequest request) {
  // Restarted before the flag is read: an interrupt() after the read stops the loop below.
  io_->restart();
  if (interrupted_.load(std::memory_order_acquire)) {
    OutboundResponse stopped;
    stopped.error = "interrupted";
    return stopped;
  }
  // Shared with the callback: after an interrupt it may run during a later call.
  auto answer = std::make_shared<std::optional<OutboundResponse>>();
  client_->fetch(std::move(request), [answer](OutboundResponse r) { *answer = std::move(r); });
  // The call's own deadline ends it; the pool's sweep waits for the next call.
  while (!*answer && io_->run_one() > 0) {
  }
  if (!*answer) {
    answer->emplace();
    (*answer)->error = interrupted_.load(std::memory_order_acquire) ? "interrupted" : "request failed: the client's event loop stopped";
  }
  return std::move(**answer);
}

void BlockingHttpClient::interrupt() {
  interrupted_.store(true, std::memory_order_release);
  io_->stop();
}

}  // namespace tahua
