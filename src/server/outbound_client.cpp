#include "server/outbound_client.h"

#include <openssl/ssl.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <memory>
#include <optional>

namespace tahua {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// One context for every outbound TLS call: the system's CAs, peers verified.
asio::ssl::context& clientTls() {
  static asio::ssl::context* ctx = [] {
    auto* c = new asio::ssl::context(asio::ssl::context::tls_client);
    c->set_default_verify_paths();
    c->set_verify_mode(asio::ssl::verify_peer);
    return c;
  }();
  return *ctx;
}

struct Call {
  Call(asio::io_context& io, OutboundRequest r, std::function<void(OutboundResponse)> d)
      : request(std::move(r)), done(std::move(d)), resolver(io), timer(io) {}
  OutboundRequest request;
  std::function<void(OutboundResponse)> done;
  tcp::resolver resolver;
  asio::steady_timer timer;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  bool timed_out = false;

  void close() {
    beast::error_code ignored;
    resolver.cancel();
    if (plain) plain->socket().close(ignored);
    if (tls) beast::get_lowest_layer(*tls).socket().close(ignored);
  }
};

template <class Stream>
asio::awaitable<void> exchange(Call& c, Stream& stream, OutboundResponse& out) {
  http::request<http::string_body> req{http::string_to_verb(c.request.method), c.request.url.target, 11};
  const HttpUrl& u = c.request.url;
  const bool default_port = u.port == (u.tls ? "443" : "80");
  req.set(http::field::host, default_port ? u.host : u.host + ":" + u.port);
  req.set(http::field::user_agent, "tahua");
  for (const auto& [name, value] : c.request.headers) req.set(name, value);
  req.body() = std::move(c.request.body);
  req.prepare_payload();
  req.keep_alive(false);
  auto [wec, wn] = co_await http::async_write(stream, req, kTuple);
  if (wec) {
    out.error = "send: " + wec.message();
    co_return;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.header_limit(16 << 10);
  parser.body_limit(c.request.max_response_bytes);
  auto [rec, rn] = co_await http::async_read(stream, buffer, parser, kTuple);
  if (rec == http::error::body_limit) {
    out.error = "response too large";
    co_return;
  }
  if (rec) {
    out.error = "receive: " + rec.message();
    co_return;
  }
  auto& res = parser.get();
  out.status = static_cast<int>(res.result_int());
  for (const auto& f : res) {
    std::string name(f.name_string());
    for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out.headers.emplace_back(std::move(name), std::string(f.value()));
  }
  out.body = std::move(res.body());
}

asio::awaitable<void> attempt(std::shared_ptr<Call> c, OutboundResponse& out) {
  const HttpUrl& u = c->request.url;
  auto [rec, endpoints] = co_await c->resolver.async_resolve(u.host, u.port, kTuple);
  if (rec) {
    out.error = c->timed_out ? "timeout" : "resolve: " + rec.message();
  } else if (!u.tls) {
    c->plain.emplace(c->resolver.get_executor());
    auto [cec, ep] = co_await c->plain->async_connect(endpoints, kTuple);
    if (cec) out.error = "connect: " + cec.message();
    else co_await exchange(*c, *c->plain, out);
  } else {
    c->tls.emplace(c->resolver.get_executor(), clientTls());
    auto& lowest = beast::get_lowest_layer(*c->tls);
    auto [cec, ep] = co_await lowest.async_connect(endpoints, kTuple);
    if (cec) {
      out.error = "connect: " + cec.message();
    } else {
      // SNI and the certificate's name: the host the URL names.
      SSL_set_tlsext_host_name(c->tls->native_handle(), u.host.c_str());
      c->tls->set_verify_callback(asio::ssl::host_name_verification(u.host));
      auto [hec] = co_await c->tls->async_handshake(asio::ssl::stream_base::client, kTuple);
      if (hec) out.error = "tls: " + hec.message();
      else co_await exchange(*c, *c->tls, out);
    }
  }
}

asio::awaitable<void> run(std::shared_ptr<Call> c) {
  OutboundResponse out;
  try {
    co_await attempt(c, out);
  } catch (const std::exception& e) {  // a header Beast refuses, an allocation: an answer, not a crash
    out = OutboundResponse{};
    out.error = std::string("request failed: ") + e.what();
  }
  if (c->timed_out) {  // whatever the cancelled operation reported
    out = OutboundResponse{};
    out.error = "timeout";
  }
  c->timer.cancel();
  c->close();
  auto done = std::move(c->done);
  done(std::move(out));
}

}  // namespace

void fetchOutbound(asio::io_context& io, OutboundRequest request, std::function<void(OutboundResponse)> done) {
  if (http::string_to_verb(request.method) == http::verb::unknown) {
    done(OutboundResponse{0, "unknown method", {}, {}});
    return;
  }
  auto c = std::make_shared<Call>(io, std::move(request), std::move(done));
  // One deadline over everything, the name lookup included (the resolver has none).
  c->timer.expires_after(c->request.timeout);
  c->timer.async_wait([weak = std::weak_ptr<Call>(c)](const beast::error_code& ec) {
    if (ec) return;
    if (auto c = weak.lock()) {
      c->timed_out = true;
      c->close();
    }
  });
  asio::co_spawn(io, run(c), asio::detached);
}

}  // namespace tahua
