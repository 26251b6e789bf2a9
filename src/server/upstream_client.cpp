// The HTTP(S) transport to upstreams: connection establishment (async DNS, connect
// timeout, optional CONNECT proxy, TLS with SNI and verification), a per-worker
// keep-alive pool, and the exchange that streams a response body piece by piece.
#include "server/upstream_client.h"

#include <openssl/ssl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <cstring>
#include <iterator>
#include <optional>

#include "core/log.h"
#include "net/deadline.h"
#include "net/socket_alive.h"
#include "providers/provider.h"
#include "telemetry/metrics.h"
#include "server/http_head.h"
#include "server/in_place_body.h"

namespace tahua {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct UpstreamConnection {
  explicit UpstreamConnection(asio::io_context& io) : socket(io), deadline(socket) {}

  tcp::socket socket;                            // plain TCP (moved into tls under TLS)
  std::optional<ssl::stream<tcp::socket>> tls;
  Deadline deadline;                             // connect, first byte, idle and total limits
  beast::flat_buffer buffer;
  std::string key;
  Clock::time_point idle_since{};

  tcp::socket& lowest() { return tls ? tls->next_layer() : socket; }
};

namespace {

template <class F>
auto withStream(UpstreamConnection& c, F&& f) {
  return c.tls ? f(*c.tls) : f(c.socket);
}

// Is a pooled connection still usable? The peer may have closed it while idle.
bool looksAlive(UpstreamConnection& c) { return socketLooksAlive(c.lowest(), c.tls.has_value()); }

// Not relayed from an upstream's head: hop-by-hop (RFC 9110 7.6.1), what the gateway
// writes itself (length, date, server), and the content type (ResponseHead has it).
// Every one of them has a Beast enum, which the parser set: no name is compared.
bool notRelayed(http::field f) {
  switch (f) {
    case http::field::connection: case http::field::keep_alive: case http::field::proxy_authenticate:
    case http::field::proxy_authorization: case http::field::te: case http::field::trailer:
    case http::field::transfer_encoding: case http::field::upgrade: case http::field::content_length:
    case http::field::date: case http::field::server: case http::field::proxy_connection:
    case http::field::alt_svc: case http::field::content_type: case http::field::set_cookie:
      return true;
    default:
      return false;
  }
}

// Whether the comma-separated token list `list` holds `name` (case-insensitive).
bool namedIn(std::string_view list, std::string_view name) {
  while (!list.empty()) {
    const auto comma = list.find(',');
    std::string_view token = list.substr(0, comma);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (beast::iequals(token, name)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

// At most one warning per second per thread: a descriptor shortage hits every request.
void warnOutOfDescriptors(const boost::system::error_code& ec) {
  thread_local Clock::time_point last{};
  const auto now = Clock::now();
  if (now - last < std::chrono::seconds(1)) return;
  last = now;
  log::warn("out of file descriptors for upstream connections (raise ulimit -n)", {{"error", ec.message()}});
}

Error timeoutError(const char* what, Millis limit) {
  Error e{ErrorKind::UpstreamTimeout,
          std::string("The upstream did not respond in time (") + what + " timeout " + std::to_string(limit.count()) + "ms)."};
  e.timeout_kind = what;  // always a literal
  return e;
}

}  // namespace

UpstreamPool::UpstreamPool() : read_buffer_(new char[kReadBufferBytes]) {}
UpstreamPool::~UpstreamPool() = default;

// A connection idle for less than this is taken without asking the socket whether the
// upstream closed it (a failed MSG_PEEK per request: it cost ~9% of the gateway's CPU per
// request). Servers' keep-alive timeouts are seconds or more; a connection closed sooner
// fails before its first byte and the request goes again on a new one (start()).
constexpr auto kTrustIdle = std::chrono::milliseconds(1000);

std::unique_ptr<UpstreamConnection> UpstreamPool::take(const std::string& key, Millis max_age) {
  auto it = idle_.find(key);
  if (it == idle_.end()) return nullptr;
  auto& list = it->second;
  const auto now = Clock::now();
  while (!list.empty()) {
    std::unique_ptr<UpstreamConnection> c = std::move(list.back());  // most recently used: warmest
    list.pop_back();
    if (now - c->idle_since <= max_age && (now - c->idle_since < kTrustIdle || looksAlive(*c))) return c;
  }
  return nullptr;
}

bool UpstreamPool::put(std::unique_ptr<UpstreamConnection>& conn, std::size_t max_idle) {
  auto& list = idle_[conn->key];
  if (list.size() >= max_idle) return false;
  conn->idle_since = Clock::now();
  list.push_back(std::move(conn));
  return true;
}

void UpstreamPool::clear() { idle_.clear(); }


namespace {

class HttpExchange final : public UpstreamExchange {
 public:
  HttpExchange(UpstreamRequest request, const ProviderRuntime& provider, UpstreamEnv& worker, const RouteConfig* route,
               std::string_view address)
      : provider_(provider), cfg_(*provider.config), worker_(worker),
        timeouts_(route ? route->timeouts.apply(cfg_.timeouts) : cfg_.timeouts), body_(std::move(request.body)),
        spooled_(std::move(request.spooled)), expect_stream_(request.expect_stream) {
    // A discovered endpoint (ip:port): its own connections, to its own address; the
    // provider's host stays the Host header and the TLS name. Through an egress proxy
    // the proxy decides where the base_url's host is.
    if (!address.empty() && !provider_.proxy.enabled) {
      address_ = address;
      endpoint_key_ = provider_.origin_key + "@" + std::string(address);
    }
    const std::string host_header = hostHeader(cfg_);
    // One allocation for the whole head (grown piece by piece it took four or five).
    head_.reserve(128 + 2 * host_header.size() + request.path.size() + request.header_lines.size() +
                  provider_.proxy.authorization.size());
    HeadWriter h(head_);
    // Through a plain-HTTP proxy the request line carries the absolute URL.
    if (provider_.proxy.enabled && !cfg_.https) {
      h.requestLine(request.method, "http://" + host_header + request.path);
      if (!provider_.proxy.authorization.empty()) h.header("Proxy-Authorization", provider_.proxy.authorization);
    } else {
      h.requestLine(request.method, request.path);
    }
    h.header("Host", host_header);
    h.header("User-Agent", "tahua/0.1");
    head_ += request.header_lines;
    h.contentLength(spooled_ ? spooled_->size() : body_.size());
    h.end();
  }

  asio::awaitable<std::optional<Error>> start(ResponseHead& head) override {
    deadline_ = Clock::now() + timeouts_.total;
    for (int attempt = 0;; ++attempt) {
      // The retry after a stale connection takes a new one: another idle one may be stale too.
      if (attempt == 0) conn_ = worker_.pool.take(poolKey(), cfg_.pool_idle_timeout);
      const bool reused = conn_ != nullptr;
      if (!conn_) {
        if (auto err = co_await connect()) co_return err;
      }
      if (aborted_) co_return interrupted();
      auto result = co_await sendAndReadHead(head);
      if (!result) {
        // The request is delivered and answered: a long stream should not keep it.
        std::string().swap(head_);
        std::string().swap(body_);
        co_return std::nullopt;
      }
      // A pooled connection the upstream closed just as we sent: nothing was processed,
      // so one retry on a fresh connection is safe.
      if (reused && attempt == 0 && stale_ && !aborted_) {
        conn_.reset();
        continue;
      }
      conn_.reset();
      co_return result;
    }
  }

  // The body start that came with the head is parsed first, where it lies. Then each
  // read takes whatever the socket holds (plain TCP: a burst larger than the connection's
  // small buffer goes on in the worker's read buffer; TLS: into the connection's buffer)
  // and parses it in place, so every event that arrived goes to the client in one write.
  asio::awaitable<std::optional<Error>> read(std::string_view& bytes, bool& done) override {
    bytes = {};
    done = false;
    if (!conn_ || aborted_) co_return interrupted();
    // A malformed element after good ones: the good ones went out with the last read.
    if (parse_error_) co_return badBody();
    auto& carry = conn_->buffer;  // bytes read but not parsed yet
    for (;;) {
      if (parser_->is_done()) {
        finish();
        done = true;
        co_return std::nullopt;
      }
      char* data = nullptr;
      std::size_t size = 0;
      bool in_scratch = false;  // data is in the worker's read buffer, not in carry
      if (head_leftover_ && carry.size() > 0) {
        // The body start that came with the head: parsed where it lies, without a read.
        data = static_cast<char*>(carry.data().data());
        size = carry.size();
      } else {
        const auto now = Clock::now();
        if (now >= deadline_) {
          dropConnection();
          co_return timeoutError("total", timeouts_.total);
        }
        // The idle limit runs from this read; the total one from the start.
        conn_->deadline.at(std::min(now + timeouts_.idle, deadline_));
        beast::error_code ec;
        if (conn_->tls) {
          auto [rec, n] = co_await conn_->tls->async_read_some(carry.prepare(kTlsReadBytes), asio::as_tuple(asio::use_awaitable));
          ec = rec;
          if (!ec) {
            carry.commit(n);
            data = static_cast<char*>(carry.data().data());
            size = carry.size();
          }
        } else {
          // Asio's read tries the socket at once and waits only when it is empty, into the
          // connection's small buffer (it holds the few bytes an element cut anyway). When
          // that fills up, the rest is taken without waiting into the worker's read buffer.
          auto& sock = conn_->socket;
          const std::size_t room = std::max<std::size_t>(512, carry.capacity() - carry.size());
          auto [rec, n] = co_await sock.async_read_some(carry.prepare(room), asio::as_tuple(asio::use_awaitable));
          ec = rec;
          if (!ec) {
            carry.commit(n);
            data = static_cast<char*>(carry.data().data());
            size = carry.size();
            if (n == room) {
              const std::span<char> scratch = worker_.pool.readBuffer();
              std::memcpy(scratch.data(), data, size);
              beast::error_code more_ec;  // an error or the end shows on the next read
              const std::size_t more = sock.read_some(asio::buffer(scratch.data() + size, scratch.size() - size), more_ec);
              carry.consume(size);
              data = scratch.data();
              size += more_ec ? 0 : more;
              in_scratch = true;
            }
          }
        }
        if (ec == asio::error::eof && !aborted_) {
          // The upstream closed: the end of a body delimited by the close, or a cut one.
          beast::error_code eof_ec;
          parser_->put_eof(eof_ec);
          if (!eof_ec && parser_->is_done()) continue;
        }
        if (ec) {
          const bool expired = conn_->deadline.expired();
          const bool idle = conn_->deadline.due() < deadline_;  // which of the two limits it was
          dropConnection();
          if (expired && !aborted_)
            co_return idle ? timeoutError("idle", timeouts_.idle) : timeoutError("total", timeouts_.total);
          co_return interrupted();
        }
      }
      head_leftover_ = false;
      std::size_t used = 0;
      const std::size_t got = parseInPlace(data, size, used);
      if (parse_error_ && got == 0) co_return badBody();
      if (!in_scratch) {
        carry.consume(used);  // the view stays valid: the buffer is only touched by the next read
      } else if (used < size) {
        // An element cut by the read (a chunk-size line, the last chunk): kept for the next.
        carry.commit(asio::buffer_copy(carry.prepare(size - used), asio::buffer(data + used, size - used)));
      }
      if (got > 0 || parser_->is_done()) {
        bytes = std::string_view(data, got);
        if (parser_->is_done()) {
          finish();
          done = true;
        }
        co_return std::nullopt;
      }
    }
  }

  // The parser keeps its framing state in flags, not in the fields.
  void releaseHead() override {
    if (parser_) parser_->get().clear();
  }

  bool bodyBuffered() const override { return conn_ && head_leftover_ && conn_->buffer.size() > 0; }

  void abort() noexcept override {
    aborted_ = true;
    boost::system::error_code ignored;
    if (resolver_) resolver_->cancel();
    if (conn_) conn_->lowest().close(ignored);
  }

 private:
  static Error interrupted() { return Error{ErrorKind::UpstreamInterrupted, "The upstream connection was interrupted."}; }

  Millis remaining(Millis phase_limit) const {
    auto left = std::chrono::duration_cast<Millis>(deadline_ - Clock::now());
    return std::max(Millis(1), std::min(left, phase_limit));
  }

  void finish() {
    if (conn_) conn_->deadline.never();
    if (conn_ && parser_->keep_alive() && !aborted_) worker_.pool.put(conn_, cfg_.pool_max_idle);
    if (!conn_) return;
    // Not kept: closed now, but freed with the exchange, since the last piece read()
    // returns may live in its buffer.
    boost::system::error_code ignored;
    conn_->lowest().close(ignored);
    spent_ = std::move(conn_);
  }

  // Parses [data, data + size) in place (parseInPlace). A malformed body sets
  // parse_error_ (the body parsed before it is still returned; the error comes with the
  // next read).
  std::size_t parseInPlace(char* data, std::size_t size, std::size_t& used) {
    return tahua::parseInPlace(*parser_, data, size, used, parse_error_);
  }

  Error badBody() {
    dropConnection();
    return Error{ErrorKind::UpstreamBadResponse, "The upstream sent a malformed response body."};
  }

  void dropConnection() { conn_.reset(); }

  asio::awaitable<std::optional<Error>> connect() {
    const auto connect_deadline = Clock::now() + timeouts_.connect;
    auto left = [&] { return std::max(Millis(1), std::chrono::duration_cast<Millis>(connect_deadline - Clock::now())); };
    const bool via_proxy = provider_.proxy.enabled;
    // Plain assignments, not a conditional expression: GCC 12 materialises a temporary
    // for `a ? b : c` in a coroutine frame and warns it may be used uninitialised.
    std::string host = cfg_.host;
    std::uint16_t port = cfg_.port;
    if (via_proxy) {
      host = provider_.proxy.host;
      port = provider_.proxy.port;
    } else if (!address_.empty()) {
      const auto colon = address_.rfind(':');
      host = std::string(address_.substr(0, colon));
      if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
      port = static_cast<std::uint16_t>(std::stoi(std::string(address_.substr(colon + 1))));
    }

    // Asio runs getaddrinfo on its own resolver thread, so a slow DNS server never
    // blocks the worker. IP literals skip it.
    tcp::resolver::results_type endpoints;
    boost::system::error_code ec;
    auto literal = asio::ip::make_address(host, ec);
    if (!ec) {
      endpoints = tcp::resolver::results_type::create(tcp::endpoint(literal, port), host, std::to_string(port));
    } else {
      resolver_.emplace(worker_.io);  // only for new connections to named hosts
      auto [rec, results] = co_await resolver_->async_resolve(host, std::to_string(port), asio::as_tuple(asio::use_awaitable));
      if (rec || aborted_) co_return Error{ErrorKind::UpstreamConnect, "Could not resolve the upstream host for provider '" + cfg_.name + "'."};
      endpoints = std::move(results);
    }

    conn_ = std::make_unique<UpstreamConnection>(worker_.io);
    conn_->key = poolKey();
    conn_->deadline.after(left());
    auto [cec, ep] = co_await asio::async_connect(conn_->socket, endpoints, asio::as_tuple(asio::use_awaitable));
    if (cec) {
      const bool timed_out = conn_->deadline.expired();
      conn_.reset();
      if (timed_out) co_return timeoutError("connect", timeouts_.connect);
      if (cec == asio::error::operation_aborted && !aborted_) {
        // Asio's range connect reports a socket it could not open as "aborted": find
        // out why by opening one (only on this failure path).
        tcp::socket probe(worker_.io);
        probe.open(endpoints.begin()->endpoint().protocol(), cec);
        if (!cec) cec = asio::error::connection_aborted;
      }
      if (cec == asio::error::no_descriptors || cec == asio::error::no_buffer_space) {
        // Our own limit, not the upstream's fault: say so, and tell the operator.
        warnOutOfDescriptors(cec);
        co_return Error{ErrorKind::Overloaded, "The gateway is out of connections; please retry shortly."};
      }
      co_return Error{ErrorKind::UpstreamConnect, "Could not connect to the upstream for provider '" + cfg_.name + "'."};
    }
    conn_->socket.set_option(tcp::no_delay(true), ec);
    // read() takes the rest of a burst with a read that must not block; Asio's own
    // operations work the same on a non-blocking socket.
    conn_->socket.non_blocking(true, ec);
    ++worker_.metrics.upstream_connections_opened[cfg_.name];

    if (via_proxy && cfg_.https) {
      if (auto err = co_await proxyConnect(left())) {
        conn_.reset();
        co_return err;
      }
    }
    if (cfg_.https) {
      conn_->tls.emplace(std::move(conn_->socket), *provider_.tls);
      conn_->deadline.watch(conn_->tls->next_layer());
      asio::ip::make_address(cfg_.host, ec);
      const bool is_ip = !ec;
      if (!is_ip) SSL_set_tlsext_host_name(conn_->tls->native_handle(), cfg_.host.c_str());
      if (cfg_.tls_verify) conn_->tls->set_verify_callback(ssl::host_name_verification(cfg_.host));
      conn_->deadline.after(left());
      auto [hec] = co_await conn_->tls->async_handshake(ssl::stream_base::client, asio::as_tuple(asio::use_awaitable));
      if (hec) {
        const bool timed_out = conn_->deadline.expired();
        conn_.reset();
        if (timed_out) co_return timeoutError("connect", timeouts_.connect);
        co_return Error{ErrorKind::UpstreamTls, "TLS handshake with the upstream for provider '" + cfg_.name + "' failed."};
      }
    }
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Error>> proxyConnect(Millis limit) {
    auto& stream = conn_->socket;
    http::request<http::empty_body> req{http::verb::connect, cfg_.host + ":" + std::to_string(cfg_.port), 11};
    req.set(http::field::host, cfg_.host + ":" + std::to_string(cfg_.port));
    if (!provider_.proxy.authorization.empty()) req.set(http::field::proxy_authorization, provider_.proxy.authorization);
    conn_->deadline.after(limit);
    auto [wec, wn] = co_await http::async_write(stream, req, asio::as_tuple(asio::use_awaitable));
    if (wec && conn_->deadline.expired()) co_return timeoutError("connect", timeouts_.connect);
    if (wec) co_return Error{ErrorKind::UpstreamConnect, "Could not reach the egress proxy."};
    http::response_parser<http::empty_body> parser;
    parser.skip(true);  // a CONNECT answer has no body
    auto [rec, rn] = co_await http::async_read_header(stream, conn_->buffer, parser, asio::as_tuple(asio::use_awaitable));
    if (rec && conn_->deadline.expired()) co_return timeoutError("connect", timeouts_.connect);
    if (rec || parser.get().result_int() != 200)
      co_return Error{ErrorKind::UpstreamConnect, "The egress proxy refused to connect to the upstream."};
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Error>> sendAndReadHead(ResponseHead& head) {
    stale_ = false;
    // The connection's buffer is empty between exchanges: size it for this one.
    if (expect_stream_) {
      if (conn_->buffer.capacity() > 1024 && conn_->buffer.size() == 0) conn_->buffer.shrink_to_fit();
    } else {
      conn_->buffer.reserve(8192);
    }
    conn_->deadline.after(remaining(timeouts_.first_byte));
    boost::system::error_code wec;
    if (spooled_) {
      // An upload: sending it is not waiting for the first byte; the total limit applies.
      conn_->deadline.at(deadline_);
      wec = co_await sendSpooled();
      conn_->deadline.after(remaining(timeouts_.first_byte));
    } else {
      std::array<asio::const_buffer, 2> request{asio::buffer(head_), asio::buffer(body_)};
      auto [ec, wn] = co_await withStream(*conn_, [&](auto& s) {
        return asio::async_write(s, request, asio::as_tuple(asio::use_awaitable));
      });
      wec = ec;
    }
    if (wec) {
      stale_ = !conn_->deadline.expired();
      if (!stale_) co_return timeoutError("first_byte", timeouts_.first_byte);
      co_return Error{ErrorKind::UpstreamConnect, "Could not send the request to the upstream for provider '" + cfg_.name + "'."};
    }
    parser_.emplace();
    parse_error_ = false;
    parser_->header_limit(64 * 1024);
    parser_->body_limit(boost::none);  // bounded by the caller (max_response_bytes) or streamed
    auto [rec, rn] = co_await withStream(*conn_, [&](auto& s) {
      return http::async_read_header(s, conn_->buffer, *parser_, asio::as_tuple(asio::use_awaitable));
    });
    if (rec) {
      if (aborted_) co_return interrupted();
      if (conn_->deadline.expired()) co_return timeoutError("first_byte", timeouts_.first_byte);
      // Closed before a single byte came back: the classic stale keep-alive race.
      stale_ = !parser_->got_some() &&
               (rec == http::error::end_of_stream || rec == asio::error::eof || rec == asio::error::connection_reset ||
                rec == ssl::error::stream_truncated);
      co_return Error{ErrorKind::UpstreamBadResponse, "The upstream closed the connection or sent an invalid response."};
    }
    conn_->deadline.never();  // until read() sets the body's limits
    // From here on the parser is fed by read() itself, as much as each read brought.
    parser_->eager(true);
    head_leftover_ = true;
    const auto& res = parser_->get();
    head.status = static_cast<int>(res.result_int());
    // Views into the parser's fields: they live as long as this exchange. One pass by the
    // fields' enums (a lookup by name walks Beast's ordered set: ~300 instructions each).
    std::string_view connection;  // the headers it names are hop-by-hop too (RFC 9110 7.6.1)
    bool typed = false, connected = false;
    std::size_t fields = 0;
    for (const auto& field : res) {
      ++fields;
      if (field.name() == http::field::content_type && !typed) head.content_type = field.value(), typed = true;
      if (field.name() == http::field::connection && !connected) connection = field.value(), connected = true;
    }
    head.event_stream = beast::iequals(head.content_type.substr(0, 17), "text/event-stream");
    // One allocation for the list: the upstream's headers and room for what the filters
    // add (the rate limiter's six x-ratelimit-*), not a regrowth at each doubling.
    head.headers.reserve(fields + 8);
    for (const auto& field : res) {
      if (notRelayed(field.name())) continue;
      std::string_view name = field.name_string();
      if (!connection.empty() && namedIn(connection, name)) continue;
      // The client's x-request-id is the gateway's own; the provider's is kept under
      // another name (what its support asks for). Beast has no enum for it.
      if (field.name() == http::field::unknown && beast::iequals(name, "x-request-id")) name = "x-upstream-request-id";
      head.headers.emplace_back(name, field.value());
    }
    co_return std::nullopt;
  }

  // The head, then each piece of an upload's body: its text, then its file range. Plain
  // TCP hands the range to the kernel (sendfile: no copy through the gateway); TLS reads
  // it 64 KiB at a time into a buffer of this exchange.
  asio::awaitable<boost::system::error_code> sendSpooled() {
    boost::system::error_code ec;
    auto writeText = [&](std::string_view text) -> asio::awaitable<boost::system::error_code> {
      auto [wec, n] = co_await withStream(*conn_, [&](auto& s) {
        return asio::async_write(s, asio::buffer(text.data(), text.size()), asio::as_tuple(asio::use_awaitable));
      });
      co_return wec;
    };
    // The head goes with the first piece's text when there is one.
    std::string first = head_;
    for (std::size_t i = 0; i < spooled_->pieces.size(); ++i) {
      const SpooledBody::Piece& piece = spooled_->pieces[i];
      if (i == 0) first += piece.text;
      ec = co_await writeText(i == 0 ? std::string_view(first) : std::string_view(piece.text));
      if (ec) co_return ec;
      if (i == 0) std::string().swap(first);
      std::uint64_t offset = piece.offset;
      std::uint64_t left = piece.length;
      while (left > 0) {
        if (aborted_) co_return asio::error::operation_aborted;
        if (!conn_->tls) {
          off_t at = static_cast<off_t>(offset);
          const ssize_t n = ::sendfile(conn_->socket.native_handle(), spooled_->fd, &at,
                                       static_cast<std::size_t>(std::min<std::uint64_t>(left, 1 << 20)));
          if (n > 0) {
            offset += static_cast<std::uint64_t>(n);
            left -= static_cast<std::uint64_t>(n);
            continue;
          }
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            auto [wait_ec] = co_await conn_->socket.async_wait(tcp::socket::wait_write, asio::as_tuple(asio::use_awaitable));
            if (wait_ec) co_return wait_ec;
            continue;
          }
          co_return n == 0 ? asio::error::eof : boost::system::error_code(errno, boost::system::system_category());
        }
        if (!file_buffer_) file_buffer_.reset(new char[kFileChunk]);
        const ssize_t n = ::pread(spooled_->fd, file_buffer_.get(), static_cast<std::size_t>(std::min<std::uint64_t>(left, kFileChunk)),
                                  static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) co_return boost::system::error_code(n == 0 ? EIO : errno, boost::system::system_category());
        ec = co_await writeText(std::string_view(file_buffer_.get(), static_cast<std::size_t>(n)));
        if (ec) co_return ec;
        offset += static_cast<std::uint64_t>(n);
        left -= static_cast<std::uint64_t>(n);
      }
    }
    co_return ec;
  }

  const ProviderRuntime& provider_;
  const ProviderConfig& cfg_;
  UpstreamEnv& worker_;
  const ProviderTimeouts timeouts_;  // the provider's, or the route's over them
  std::optional<tcp::resolver> resolver_;
  std::string_view address_;   // a discovered endpoint's ip:port (the snapshot's, which the request holds)
  std::string endpoint_key_;   // its pool key
  const std::string& poolKey() const { return endpoint_key_.empty() ? provider_.origin_key : endpoint_key_; }
  std::string head_;  // request line and headers, formatted once
  std::string body_;
  std::optional<SpooledBody> spooled_;  // an upload's body, instead of body_
  std::unique_ptr<char[]> file_buffer_;  // an upload's reads over TLS
  static constexpr std::size_t kFileChunk = 64 * 1024;
  std::unique_ptr<UpstreamConnection> conn_;
  std::unique_ptr<UpstreamConnection> spent_;  // closed after the body; see finish()
  std::optional<http::response_parser<InPlaceBody>> parser_;
  Clock::time_point deadline_{};
  bool expect_stream_ = false;
  bool aborted_ = false;
  bool stale_ = false;
  bool head_leftover_ = false;  // the body start read with the head is not parsed yet
  bool parse_error_ = false;
  // A TLS read: the records OpenSSL holds are decrypted into the connection's buffer.
  static constexpr std::size_t kTlsReadBytes = 16 * 1024;
};

}  // namespace

std::unique_ptr<UpstreamExchange> ProviderAdapter::openExchange(UpstreamRequest request, RequestContext& ctx,
                                                                const ProviderRuntime& provider, UpstreamEnv& worker) const {
  return std::make_unique<HttpExchange>(std::move(request), provider, worker, ctx.route,
                                        ctx.deployment ? std::string_view(ctx.deployment->address) : std::string_view());
}

}  // namespace tahua
