// The outbound HTTP client (src/net/http_client.h) against real loopback servers: a
// small Beast server on the client's own io_context answers as each test scripts it,
// and counts the connections it accepted. Pooling, a kept connection the server closed,
// the size bound, the deadline and the idle limit, a streamed body, TLS against a CA
// made here, the proxy (absolute form and CONNECT), closeAll(), and the blocking client.
#include "net/http_client.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net/http_client_await.h"

namespace tahua {
namespace http_client_test {  // named, not anonymous: eight test files compile as one unit

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

using Request = http::request<http::string_body>;

// What the server does with one request.
struct Reply {
  Reply(std::string text, std::chrono::milliseconds wait = 0ms, bool close_after = false)
      : head_and_body(std::move(text)), delay(wait), close(close_after) {}
  // `text`, then `rest` once `when` is true (never: the answer stalls there).
  static Reply then(std::string text, std::function<bool()> when, std::string rest) {
    Reply r(std::move(text));
    r.wait_for = std::move(when);
    r.rest = std::move(rest);
    return r;
  }

  std::string head_and_body;           // written as is
  std::chrono::milliseconds delay{0};  // before writing it
  std::function<bool()> wait_for;      // then, polled: when true, `rest` is written
  std::string rest;
  bool close = false;  // the connection is closed after (without answering, when nothing is to be written)
};

std::string answer(std::string_view body, std::string_view extra_headers = {}) {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + std::string(extra_headers) + "\r\n" +
         std::string(body);
}

std::string chunk(std::string_view data) {
  char size[16];
  std::snprintf(size, sizeof size, "%zx", data.size());
  return std::string(size) + "\r\n" + std::string(data) + "\r\n";
}

// A loopback HTTP/1.1 server (plain, TLS, or a proxy that answers CONNECT and then
// serves the tunnel's TLS itself), on the io_context it is given.
class Server {
 public:
  using Handler = std::function<Reply(const Request&)>;
  Server(asio::io_context& io, Handler handler, ssl::context* tls = nullptr, bool connect_proxy = false)
      : io_(io), acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), handler_(std::move(handler)),
        tls_(tls), connect_proxy_(connect_proxy) {
    asio::co_spawn(io_, acceptLoop(), asio::detached);
  }
  ~Server() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  std::string url(std::string_view path, std::string_view host = "127.0.0.1") const {
    return std::string(tls_ && !connect_proxy_ ? "https://" : "http://") + std::string(host) + ":" + std::to_string(port()) +
           std::string(path);
  }

  int accepted = 0;
  std::vector<std::string> seen;      // "METHOD target" per request
  std::vector<std::string> headers;   // the last request's "name: value" lines
  std::vector<std::string> connects;  // CONNECT targets

 private:
  asio::awaitable<void> acceptLoop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(kTuple);
      if (ec) co_return;
      ++accepted;
      asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> serve(tcp::socket socket) {
    beast::flat_buffer buffer;
    if (connect_proxy_) {
      Request connect;
      auto [ec, n] = co_await http::async_read(socket, buffer, connect, kTuple);
      if (ec || connect.method() != http::verb::connect) co_return;
      connects.emplace_back(connect.target());
      auto [wec, wn] = co_await asio::async_write(socket, asio::buffer(std::string_view("HTTP/1.1 200 OK\r\n\r\n")), kTuple);
      if (wec) co_return;
    }
    if (!tls_) co_return co_await requests(socket, buffer);
    ssl::stream<tcp::socket> stream(std::move(socket), *tls_);
    auto [hec] = co_await stream.async_handshake(ssl::stream_base::server, kTuple);
    if (!hec) co_await requests(stream, buffer);
  }

  template <class Stream>
  asio::awaitable<void> requests(Stream& s, beast::flat_buffer& buffer) {
    asio::steady_timer timer(io_);
    for (;;) {
      Request req;
      auto [ec, n] = co_await http::async_read(s, buffer, req, kTuple);
      if (ec) co_return;
      seen.push_back(std::string(req.method_string()) + " " + std::string(req.target()));
      headers.clear();
      for (const auto& f : req) headers.push_back(std::string(f.name_string()) + ": " + std::string(f.value()));
      Reply r = handler_(req);
      if (r.delay.count() > 0) {
        timer.expires_after(r.delay);
        co_await timer.async_wait(kTuple);
      }
      if (!r.head_and_body.empty()) {
        auto [wec, wn] = co_await asio::async_write(s, asio::buffer(r.head_and_body), kTuple);
        if (wec) co_return;
      }
      if (r.wait_for) {
        for (auto until = Clock::now() + 5s; !r.wait_for() && Clock::now() < until;) {
          timer.expires_after(5ms);
          co_await timer.async_wait(kTuple);
        }
        auto [wec, wn] = co_await asio::async_write(s, asio::buffer(r.rest), kTuple);
        if (wec) co_return;
      }
      if (r.close) co_return co_await finish(s, timer);
    }
  }

  // Closing: plain TCP closes with the frame; TLS says close_notify first (as Node and
  // most servers do), then closes the socket a little later.
  static asio::awaitable<void> finish(tcp::socket&, asio::steady_timer&) { co_return; }
  static asio::awaitable<void> finish(ssl::stream<tcp::socket>& s, asio::steady_timer& timer) {
    timer.expires_after(100ms);
    timer.async_wait([&s](boost::system::error_code ec) {
      boost::system::error_code ignored;
      if (!ec) s.next_layer().close(ignored);
    });
    co_await s.async_shutdown(kTuple);  // waits for the peer's close_notify: an idle client sends none
    timer.cancel();
  }

  asio::io_context& io_;
  tcp::acceptor acceptor_;
  Handler handler_;
  ssl::context* tls_;
  bool connect_proxy_;
};

HttpUrl url(const std::string& text) {
  std::string error;
  auto u = parseHttpUrl(text, &error, true);
  EXPECT_TRUE(u) << error;
  return u.value_or(HttpUrl{});
}

OutboundRequest get(const std::string& text, Millis timeout = Millis(5000)) {
  OutboundRequest r;
  r.url = url(text);
  r.timeout = timeout;
  return r;
}

struct Loop {
  asio::io_context io;

  // Runs until the call answered (bounded: a hung call fails the test, not the run).
  OutboundResponse call(HttpClient& client, OutboundRequest r) {
    std::optional<OutboundResponse> got;
    client.fetch(std::move(r), [&got](OutboundResponse res) { got = std::move(res); });
    EXPECT_FALSE(got) << "done ran inside fetch()";
    runUntil([&] { return got.has_value(); });
    if (!got) {
      ADD_FAILURE() << "no answer in 10 s";
      return OutboundResponse{};
    }
    return std::move(*got);
  }
  void runUntil(const std::function<bool()>& ready) {
    const auto limit = Clock::now() + 10s;
    while (!ready() && Clock::now() < limit) runOne(50ms);
  }
  void runFor(std::chrono::milliseconds d) {
    const auto limit = Clock::now() + d;
    while (Clock::now() < limit) runOne(5ms);
  }
  // A loop without a server runs out of work between calls, and stops.
  void runOne(std::chrono::milliseconds d) {
    if (io.stopped()) io.restart();
    if (io.run_one_for(d) == 0) std::this_thread::sleep_for(1ms);
  }
};

TEST(HttpClient, TwoCallsToOneHostShareAConnection) {
  Loop l;
  Server server(l.io, [](const Request& req) { return Reply{answer("hello " + std::string(req.target()))}; });
  HttpClient client(l.io);
  auto a = l.call(client, get(server.url("/a")));
  EXPECT_EQ(a.status, 200) << a.error;
  EXPECT_EQ(a.body, "hello /a");
  auto b = l.call(client, get(server.url("/b?x=1")));
  EXPECT_EQ(b.status, 200) << b.error;
  EXPECT_EQ(b.body, "hello /b?x=1");
  EXPECT_EQ(server.accepted, 1);
  EXPECT_EQ(client.counts().opened, 1u);
  EXPECT_EQ(client.counts().reused, 1u);
  EXPECT_EQ(client.counts().idle, 1u);
  // Another host:port is another pool.
  Server other(l.io, [](const Request&) { return Reply{answer("other")}; });
  EXPECT_EQ(l.call(client, get(other.url("/"))).status, 200);
  EXPECT_EQ(other.accepted, 1);
  EXPECT_EQ(client.counts().idle, 2u);
}

TEST(HttpClient, TheRequestCarriesHostMethodHeadersAndBody) {
  Loop l;
  std::string body_seen;
  Server server(l.io, [&](const Request& req) {
    body_seen = req.body();
    return Reply{answer("{}", "X-Answer: yes\r\n")};
  });
  HttpClient client(l.io);
  OutboundRequest r = get(server.url("/post"));
  r.method = "POST";
  r.headers = {{"content-type", "application/json"}, {"x-token", "t1"}};
  r.body = R"({"a":1})";
  auto res = l.call(client, std::move(r));
  EXPECT_EQ(res.status, 200) << res.error;
  EXPECT_EQ(server.seen.back(), "POST /post");
  EXPECT_EQ(body_seen, R"({"a":1})");
  const auto has = [&](const std::string& line) {
    return std::find(server.headers.begin(), server.headers.end(), line) != server.headers.end();
  };
  EXPECT_TRUE(has("Host: 127.0.0.1:" + std::to_string(server.port())));
  EXPECT_TRUE(has("x-token: t1"));
  EXPECT_TRUE(has("content-type: application/json"));
  EXPECT_TRUE(has("Content-Length: 7"));
  bool answer_header = false;
  for (const auto& [name, value] : res.headers) answer_header |= name == "x-answer" && value == "yes";
  EXPECT_TRUE(answer_header) << "header names in lower case";
}

TEST(HttpClient, AConnectionTheServerClosedWhileIdleIsNotReused) {
  Loop l;
  Server server(l.io, [](const Request&) { return Reply{answer("once"), 0ms, /*close_after=*/true}; });
  HttpClient client(l.io);
  EXPECT_EQ(l.call(client, get(server.url("/"))).status, 200);
  l.runFor(50ms);  // the server's close arrives
  auto second = l.call(client, get(server.url("/")));
  EXPECT_EQ(second.status, 200) << second.error;
  EXPECT_EQ(server.accepted, 2);
  EXPECT_EQ(client.counts().reused, 0u);
}

TEST(HttpClient, AConnectionClosedAsTheRequestArrivesIsReplacedForAGetNotForAPost) {
  Loop l;
  int requests = 0;
  // Every connection's second request is dropped unanswered: the keep-alive race.
  Server server(l.io, [&](const Request&) {
    ++requests;
    return requests % 2 == 0 ? Reply{"", 0ms, /*close_after=*/true} : Reply{answer("ok")};
  });
  HttpClient client(l.io);
  EXPECT_EQ(l.call(client, get(server.url("/"))).status, 200);
  auto again = l.call(client, get(server.url("/")));
  EXPECT_EQ(again.status, 200) << again.error;
  EXPECT_EQ(server.accepted, 2) << "once more on a new connection";
  OutboundRequest post = get(server.url("/"));
  post.method = "POST";
  post.body = "x";
  auto lost = l.call(client, std::move(post));
  EXPECT_EQ(lost.status, 0);
  EXPECT_EQ(lost.error.rfind("receive: ", 0), 0u) << lost.error;
  EXPECT_EQ(server.accepted, 2) << "a POST is not sent twice";
}

TEST(HttpClient, AnAnswerAskingToCloseIsNotKept) {
  Loop l;
  Server server(l.io, [](const Request&) { return Reply{answer("bye", "Connection: close\r\n"), 0ms, true}; });
  HttpClient client(l.io);
  EXPECT_EQ(l.call(client, get(server.url("/"))).status, 200);
  EXPECT_EQ(client.counts().idle, 0u);
  EXPECT_EQ(l.call(client, get(server.url("/"))).status, 200);
  EXPECT_EQ(server.accepted, 2);
}

TEST(HttpClient, WithoutPoolingEveryCallHasItsConnectionAndAsksToClose) {
  Loop l;
  Server server(l.io, [](const Request&) { return Reply{answer("x")}; });
  HttpClientOptions options;
  options.max_idle_per_host = 0;
  HttpClient client(l.io, options);
  EXPECT_EQ(l.call(client, get(server.url("/"))).status, 200);
  EXPECT_NE(std::find(server.headers.begin(), server.headers.end(), "Connection: close"), server.headers.end());
  EXPECT_EQ(l.call(client, get(server.url("/"))).status, 200);
  EXPECT_EQ(server.accepted, 2);
}

TEST(HttpClient, IdleConnectionsExpireAndAreBounded) {
  Loop l;
  Server server(l.io, [](const Request&) { return Reply{answer("x"), 30ms}; });
  HttpClientOptions options;
  options.max_idle_per_host = 2;
  options.idle_expiry = Millis(100);
  HttpClient client(l.io, options);
  // Three at once: three connections, two kept.
  int answered = 0;
  for (int i = 0; i < 3; ++i) client.fetch(get(server.url("/")), [&](OutboundResponse r) { answered += r.status == 200; });
  l.runUntil([&] { return answered == 3; });
  EXPECT_EQ(answered, 3);
  EXPECT_EQ(server.accepted, 3);
  EXPECT_EQ(client.counts().idle, 2u);
  l.runUntil([&] { return client.counts().idle == 0; });
  EXPECT_EQ(client.counts().idle, 0u) << "the sweep closed them";
  EXPECT_EQ(l.call(client, get(server.url("/"))).status, 200);
  EXPECT_EQ(server.accepted, 4);
}

TEST(HttpClient, ABodyOverTheBoundFailsTheCall) {
  Loop l;
  Server server(l.io, [](const Request&) { return Reply{answer(std::string(100'000, 'x'))}; });
  HttpClient client(l.io);
  OutboundRequest r = get(server.url("/big"));
  r.max_response_bytes = 64 << 10;
  auto res = l.call(client, std::move(r));
  EXPECT_EQ(res.status, 0);
  EXPECT_EQ(res.error, "response too large");
  EXPECT_TRUE(res.body.empty());
  OutboundRequest fits = get(server.url("/big"));
  fits.max_response_bytes = 100'000;
  auto whole = l.call(client, std::move(fits));
  EXPECT_EQ(whole.status, 200) << whole.error;
  EXPECT_EQ(whole.body.size(), 100'000u);
}

TEST(HttpClient, TheDeadlineEndsASlowCallAndItsConnection) {
  Loop l;
  Server server(l.io, [](const Request&) { return Reply{answer("late"), 2000ms}; });
  HttpClient client(l.io);
  const auto start = Clock::now();
  auto res = l.call(client, get(server.url("/slow"), Millis(150)));
  EXPECT_EQ(res.status, 0);
  EXPECT_EQ(res.error, "timeout");
  EXPECT_LT(Clock::now() - start, 1500ms);
  EXPECT_EQ(client.counts().idle, 0u);
}

TEST(HttpClient, TheDeadlineCoversABodyThatTrickles) {
  Loop l;
  Server server(l.io, [](const Request&) {
    return Reply::then("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", [] { return false; }, "defghij");
  });
  HttpClient client(l.io);
  auto res = l.call(client, get(server.url("/"), Millis(200)));
  EXPECT_EQ(res.status, 0) << "no half answer";
  EXPECT_EQ(res.error, "timeout");
}

TEST(HttpClient, AStreamedBodyArrivesPieceByPieceBeforeItEnds) {
  Loop l;
  std::vector<std::string> pieces;
  Server server(l.io, [&](const Request&) {
    return Reply::then("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk("line one\n"),
                       [&] { return !pieces.empty(); },  // the second only once the first was handed over
                       chunk("line two\n") + chunk(""));
  });
  HttpClient client(l.io);
  OutboundRequest r = get(server.url("/watch"), Millis(0));
  r.head_timeout = Millis(2000);
  r.idle_timeout = Millis(2000);
  r.max_response_bytes = 4;  // bounds a body read whole, not a stream
  r.on_body = [&](std::string_view p) {
    pieces.emplace_back(p);
    return true;
  };
  auto res = l.call(client, std::move(r));
  EXPECT_EQ(res.status, 200) << res.error;
  EXPECT_TRUE(res.error.empty()) << res.error;
  EXPECT_TRUE(res.body.empty());
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0], "line one\n");
  EXPECT_EQ(pieces[1], "line two\n");
  EXPECT_EQ(client.counts().idle, 1u) << "a stream read to its end leaves a reusable connection";
}

TEST(HttpClient, AStreamSilentForItsIdleLimitEndsWithItsStatus) {
  Loop l;
  Server server(l.io, [](const Request&) {
    return Reply::then("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk("x\n"), [] { return false; }, "");
  });
  HttpClient client(l.io);
  OutboundRequest r = get(server.url("/watch"), Millis(0));
  r.idle_timeout = Millis(150);
  std::string got;
  r.on_body = [&](std::string_view p) {
    got += p;
    return true;
  };
  auto res = l.call(client, std::move(r));
  EXPECT_EQ(res.status, 200);
  EXPECT_EQ(res.error, "idle");
  EXPECT_EQ(got, "x\n");
}

TEST(HttpClient, OnBodyReturningFalseEndsTheCallWithoutAnError) {
  Loop l;
  Server server(l.io, [](const Request&) {
    return Reply::then("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk("stop here\n"), [] { return false; }, "");
  });
  HttpClient client(l.io);
  OutboundRequest r = get(server.url("/watch"));
  r.on_body = [](std::string_view) { return false; };
  auto res = l.call(client, std::move(r));
  EXPECT_EQ(res.status, 200);
  EXPECT_TRUE(res.error.empty()) << res.error;
  EXPECT_EQ(client.counts().idle, 0u) << "a body left unread: not reusable";
}

TEST(HttpClient, AStreamsErrorAnswerIsReadWholeAndBounded) {
  Loop l;
  Server server(l.io, [](const Request&) { return Reply{"HTTP/1.1 410 Gone\r\nContent-Length: 4\r\n\r\ngone"}; });
  HttpClient client(l.io);
  OutboundRequest r = get(server.url("/watch"));
  bool streamed = false;
  r.on_body = [&](std::string_view) { return streamed = true; };
  auto res = l.call(client, std::move(r));
  EXPECT_EQ(res.status, 410);
  EXPECT_EQ(res.body, "gone");
  EXPECT_FALSE(streamed);
}

TEST(HttpClient, CloseAllEndsCallsInFlightAndDropsIdleConnections) {
  Loop l;
  Server server(l.io, [](const Request& req) { return Reply{answer("x"), req.target() == "/slow" ? 2000ms : 0ms}; });
  HttpClient client(l.io);
  EXPECT_EQ(l.call(client, get(server.url("/fast"))).status, 200);
  EXPECT_EQ(client.counts().idle, 1u);
  std::optional<OutboundResponse> slow;
  client.fetch(get(server.url("/slow")), [&](OutboundResponse r) { slow = std::move(r); });
  l.runFor(50ms);
  client.closeAll();
  l.runUntil([&] { return slow.has_value(); });
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->error, "cancelled");
  EXPECT_EQ(client.counts().idle, 0u);
  EXPECT_EQ(l.call(client, get(server.url("/fast"))).status, 200) << "later calls work";
}

TEST(HttpClient, RefusedCallsAnswerLaterNotInsideFetch) {
  Loop l;
  HttpClient client(l.io);
  OutboundRequest r = get("http://127.0.0.1:9/");
  r.method = "BREW";
  EXPECT_EQ(l.call(client, std::move(r)).error, "unknown method");
  HttpClientOptions bad_ca;
  bad_ca.ca_file = "/nonexistent/ca.pem";
  HttpClient broken(l.io, bad_ca);
  EXPECT_EQ(broken.setupError().rfind("ca_file /nonexistent/ca.pem: ", 0), 0u) << broken.setupError();
  EXPECT_EQ(l.call(broken, get("http://127.0.0.1:9/")).error, broken.setupError());
}

TEST(HttpClient, ConnectAndResolveFailuresSayWhich) {
  Loop l;
  HttpClient client(l.io);
  // A port nothing listens on: bind one and close it.
  unsigned short port;
  {
    tcp::acceptor a(l.io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = a.local_endpoint().port();
  }
  auto refused = l.call(client, get("http://127.0.0.1:" + std::to_string(port) + "/"));
  EXPECT_EQ(refused.status, 0);
  EXPECT_EQ(refused.error.rfind("connect: ", 0), 0u) << refused.error;
  auto unknown = l.call(client, get("http://host.invalid/"));
  EXPECT_EQ(unknown.error.rfind("resolve: ", 0), 0u) << unknown.error;
}

TEST(HttpClient, ThroughAProxyPlainHttpNamesTheWholeUrl) {
  Loop l;
  Server proxy(l.io, [](const Request&) { return Reply{answer("via proxy")}; });
  auto settings = parseProxyUrl("http://user:secret@127.0.0.1:" + std::to_string(proxy.port()));
  ASSERT_TRUE(settings);
  HttpClientOptions options;
  options.proxy = *settings;
  HttpClient client(l.io, options);
  auto res = l.call(client, get("http://backend.internal:8080/path?q=1"));
  EXPECT_EQ(res.status, 200) << res.error;
  EXPECT_EQ(res.body, "via proxy");
  EXPECT_EQ(proxy.seen.back(), "GET http://backend.internal:8080/path?q=1");
  EXPECT_NE(std::find(proxy.headers.begin(), proxy.headers.end(), "Proxy-Authorization: Basic dXNlcjpzZWNyZXQ="),
            proxy.headers.end());
  EXPECT_NE(std::find(proxy.headers.begin(), proxy.headers.end(), "Host: backend.internal:8080"), proxy.headers.end());
}

// A throwaway PKI: a CA and a certificate it signs for DNS:localhost.
struct TestPki {
  std::string ca_pem, leaf_pem, leaf_key_pem;

  TestPki() {
    EVP_PKEY* ca_key = EVP_EC_gen("P-256");
    EVP_PKEY* leaf_key = EVP_EC_gen("P-256");
    X509* ca = make(ca_key, ca_key, nullptr, "tahua test CA", "critical,CA:TRUE", nullptr);
    X509* leaf = make(leaf_key, ca_key, ca, "localhost", "CA:FALSE", "DNS:localhost");
    ca_pem = pem([&](BIO* b) { PEM_write_bio_X509(b, ca); });
    leaf_pem = pem([&](BIO* b) { PEM_write_bio_X509(b, leaf); });
    leaf_key_pem = pem([&](BIO* b) { PEM_write_bio_PrivateKey(b, leaf_key, nullptr, nullptr, 0, nullptr, nullptr); });
    X509_free(ca);
    X509_free(leaf);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(leaf_key);
  }

  std::unique_ptr<ssl::context> serverContext() const {
    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
    ctx->use_certificate_chain(asio::buffer(leaf_pem));
    ctx->use_private_key(asio::buffer(leaf_key_pem), ssl::context::pem);
    return ctx;
  }

 private:
  static X509* make(EVP_PKEY* key, EVP_PKEY* signer, X509* issuer, const char* cn, const char* basic, const char* san) {
    static long serial = 1;
    X509* c = X509_new();
    X509_set_version(c, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(c), serial++);
    X509_gmtime_adj(X509_getm_notBefore(c), -60);
    X509_gmtime_adj(X509_getm_notAfter(c), 3600);
    X509_set_pubkey(c, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(c), "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
    X509_set_issuer_name(c, X509_get_subject_name(issuer ? issuer : c));
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer ? issuer : c, c, nullptr, nullptr, 0);
    const std::pair<int, const char*> exts[] = {{NID_basic_constraints, basic}, {NID_subject_alt_name, san}};
    for (const auto& [nid, value] : exts) {
      if (!value) continue;
      X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
      X509_add_ext(c, e, -1);
      X509_EXTENSION_free(e);
    }
    X509_sign(c, signer, EVP_sha256());
    return c;
  }
  template <class F>
  static std::string pem(F write) {
    BIO* b = BIO_new(BIO_s_mem());
    write(b);
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    std::string out(data, static_cast<std::size_t>(n));
    BIO_free(b);
    return out;
  }
};

TEST(HttpClient, TlsChecksTheCertificateAgainstTheGivenCaAndTheHostsName) {
  Loop l;
  TestPki pki;
  auto tls = pki.serverContext();
  Server server(l.io, [](const Request&) { return Reply{answer("secure")}; }, tls.get());
  HttpClientOptions options;
  options.ca_pem = pki.ca_pem;
  HttpClient client(l.io, options);
  auto ok = l.call(client, get(server.url("/", "localhost")));
  EXPECT_EQ(ok.status, 200) << ok.error;
  EXPECT_EQ(ok.body, "secure");
  EXPECT_EQ(l.call(client, get(server.url("/", "localhost"))).status, 200);
  EXPECT_EQ(server.accepted, 1) << "kept-alive over TLS too";
  auto wrong_name = l.call(client, get(server.url("/", "127.0.0.1")));
  EXPECT_EQ(wrong_name.error.rfind("tls: ", 0), 0u) << wrong_name.error;
  HttpClient system_cas(l.io);  // the test CA is not among them
  auto untrusted = l.call(system_cas, get(server.url("/", "localhost")));
  EXPECT_EQ(untrusted.error.rfind("tls: ", 0), 0u) << untrusted.error;
}

TEST(HttpClient, ATlsConnectionTheServerIsClosingIsNotReused) {
  Loop l;
  TestPki pki;
  auto tls = pki.serverContext();
  Server server(l.io, [](const Request&) { return Reply{answer("once"), 0ms, /*close_after=*/true}; }, tls.get());
  HttpClientOptions options;
  options.ca_pem = pki.ca_pem;
  HttpClient client(l.io, options);
  EXPECT_EQ(l.call(client, get(server.url("/", "localhost"))).status, 200);
  l.runFor(50ms);  // the server's close_notify is in, its FIN not yet
  OutboundRequest post = get(server.url("/", "localhost"));
  post.method = "POST";  // not retried: it must not go out on the closing connection
  auto second = l.call(client, std::move(post));
  EXPECT_EQ(second.status, 200) << second.error;
  EXPECT_EQ(client.counts().reused, 0u);
  EXPECT_EQ(server.accepted, 2);
}

TEST(HttpClient, ThroughAProxyHttpsTunnelsWithConnect) {
  Loop l;
  TestPki pki;
  auto tls = pki.serverContext();
  // The "proxy" answers CONNECT, then is the TLS server itself at the tunnel's end.
  Server proxy(l.io, [](const Request& req) { return Reply{answer("tunnelled " + std::string(req.target()))}; }, tls.get(), true);
  ProxySettings settings{true, "127.0.0.1", proxy.port(), ""};
  HttpClientOptions options;
  options.ca_pem = pki.ca_pem;
  options.proxy = settings;
  HttpClient client(l.io, options);
  auto res = l.call(client, get("https://localhost:8443/x"));
  EXPECT_EQ(res.status, 200) << res.error;
  EXPECT_EQ(res.body, "tunnelled /x");
  ASSERT_EQ(proxy.connects.size(), 1u);
  EXPECT_EQ(proxy.connects[0], "localhost:8443");
}

TEST(HttpClient, AwaitableForCoroutines) {
  Loop l;
  Server server(l.io, [](const Request&) { return Reply{answer("awaited")}; });
  HttpClient client(l.io);
  std::optional<OutboundResponse> got;
  asio::co_spawn(l.io, [&]() -> asio::awaitable<void> { got = co_await fetchAwaitable(client, get(server.url("/"))); },
                 asio::detached);
  l.runUntil([&] { return got.has_value(); });
  ASSERT_TRUE(got);
  EXPECT_EQ(got->body, "awaited");
}

TEST(BlockingHttpClient, CallsFromAThreadThatMayBlockKeepTheirConnection) {
  asio::io_context server_io;
  Server server(server_io, [](const Request& req) { return Reply{answer(req.body())}; });
  auto guard = asio::make_work_guard(server_io);
  std::thread t([&] { server_io.run(); });
  {
    BlockingHttpClient client;
    for (const char* body : {"one", "two"}) {
      OutboundRequest r = get(server.url("/hook"));
      r.method = "POST";
      r.body = body;
      auto res = client.fetch(std::move(r));
      EXPECT_EQ(res.status, 200) << res.error;
      EXPECT_EQ(res.body, body);
    }
    EXPECT_EQ(client.client().counts().opened, 1u);
    EXPECT_EQ(client.client().counts().reused, 1u);
  }
  server_io.stop();
  t.join();
  EXPECT_EQ(server.accepted, 1);  // read after the join: the server's thread is done
}

}  // namespace http_client_test
}  // namespace tahua
