#include "kubernetes/kube_client.h"

#include <openssl/ssl.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <array>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "http/http_url.h"

namespace tahua {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kMaxBody = 16u << 20;   // a list of thousands of resources
constexpr std::size_t kMaxErrorBody = 64u << 10;

// One connection, closed by its timer (deadline or idle) or by cancel().
struct Conn {
  explicit Conn(asio::io_context& io) : resolver(io), timer(io) {}
  tcp::resolver resolver;
  asio::steady_timer timer;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  bool timed_out = false;
  bool cancelled = false;

  void close() {
    beast::error_code ignored;
    resolver.cancel();
    if (plain) plain->socket().close(ignored);
    if (tls) beast::get_lowest_layer(*tls).socket().close(ignored);
  }
  // Closes the connection when `after` passes without another arm().
  void arm(Millis after) {
    timer.expires_after(after);
    timer.async_wait([this](const beast::error_code& ec) {
      if (ec) return;
      timed_out = true;
      close();
    });
  }
};

std::optional<std::string> readToken(const std::string& path) {
  if (path.empty()) return std::string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream buf;
  buf << in.rdbuf();
  std::string t = buf.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  return t;
}

}  // namespace

struct KubeClient::Impl {
  explicit Impl(asio::io_context& i) : io(i), tls(asio::ssl::context::tls_client) {}
  asio::io_context& io;
  std::optional<HttpUrl> server;
  asio::ssl::context tls;
  std::string setup_error;  // the URL or the CA file would not do: every call fails with it
  std::set<Conn*> open;

  // Reads the answer: the head, then either the whole body (bounded) or, for a 200 with
  // `on_line`, line by line with `idle` re-armed before each read.
  template <class Stream>
  asio::awaitable<KubeResponse> exchange(Conn& c, Stream& s, http::request<http::string_body>& req, Millis idle,
                                         const std::function<bool(std::string_view)>* on_line) {
    KubeResponse out;
    auto [wec, wn] = co_await http::async_write(s, req, kTuple);
    if (wec) {
      out.error = "send: " + wec.message();
      co_return out;
    }
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.header_limit(64u << 10);
    parser.body_limit(boost::none);  // bounded below, per use
    auto [hec, hn] = co_await http::async_read_header(s, buffer, parser, kTuple);
    if (hec) {
      out.error = "receive: " + hec.message();
      co_return out;
    }
    out.status = static_cast<int>(parser.get().result_int());
    const bool lines = on_line && out.status == 200;
    const std::size_t limit = lines ? kMaxBody : out.status == 200 ? kMaxBody : kMaxErrorBody;
    std::array<char, 16384> chunk;
    std::string pending;  // a line's start, or the whole body
    while (!parser.is_done()) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      if (lines) c.arm(idle);
      // read_some: a watch event is handed over when it arrives, not when 16 KB have.
      auto [rec, rn] = co_await http::async_read_some(s, buffer, parser, kTuple);
      if (rec && rec != http::error::need_buffer) {
        out.error = "receive: " + rec.message();
        co_return out;
      }
      const std::size_t got = chunk.size() - parser.get().body().size;
      pending.append(chunk.data(), got);
      if (!lines) {
        if (pending.size() > limit) {
          out.error = "answer too large";
          co_return out;
        }
        continue;
      }
      std::size_t start = 0;
      for (std::size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
        std::string_view line(pending.data() + start, nl - start);
        if (!line.empty() && !(*on_line)(line)) co_return out;
      }
      pending.erase(0, start);
      if (pending.size() > limit) {
        out.error = "a watch event over 16 MiB";
        co_return out;
      }
    }
    if (lines) {
      if (!pending.empty()) (*on_line)(pending);
    } else {
      out.body = std::move(pending);
    }
    co_return out;
  }

  asio::awaitable<KubeResponse> run(bool cancelled, const KubernetesConfig& cfg, std::string_view method, std::string target,
                                    std::string body, std::string_view content_type, Millis idle,
                                    const std::function<bool(std::string_view)>* on_line) {
    KubeResponse out;
    if (cancelled) {
      out.error = "cancelled";
      co_return out;
    }
    if (!setup_error.empty()) {
      out.error = setup_error;
      co_return out;
    }
    const auto token = readToken(cfg.token_file);
    if (!token) {
      out.error = "cannot read kubernetes.token_file " + cfg.token_file;
      co_return out;
    }
    const HttpUrl& u = *server;
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, u.host + ":" + u.port);
    req.set(http::field::user_agent, "tahua");
    req.set(http::field::accept, "application/json");
    if (!token->empty()) req.set(http::field::authorization, "Bearer " + *token);
    if (!content_type.empty()) req.set(http::field::content_type, content_type);
    req.body() = std::move(body);
    req.prepare_payload();
    req.keep_alive(false);

    Conn c(io);
    open.insert(&c);
    c.arm(cfg.timeout);  // connect and, for a call, the whole exchange
    try {
      auto [rec, endpoints] = co_await c.resolver.async_resolve(u.host, u.port, kTuple);
      if (rec) {
        out.error = "resolve: " + rec.message();
      } else if (!u.tls) {
        c.plain.emplace(io);
        auto [cec, ep] = co_await c.plain->async_connect(endpoints, kTuple);
        if (cec) out.error = "connect: " + cec.message();
        else out = co_await exchange(c, *c.plain, req, idle, on_line);
      } else {
        c.tls.emplace(io, tls);
        auto [cec, ep] = co_await beast::get_lowest_layer(*c.tls).async_connect(endpoints, kTuple);
        if (cec) {
          out.error = "connect: " + cec.message();
        } else {
          SSL_set_tlsext_host_name(c.tls->native_handle(), u.host.c_str());
          c.tls->set_verify_callback(asio::ssl::host_name_verification(u.host));
          auto [hec] = co_await c.tls->async_handshake(asio::ssl::stream_base::client, kTuple);
          if (hec) out.error = "tls: " + hec.message();
          else out = co_await exchange(c, *c.tls, req, idle, on_line);
        }
      }
    } catch (const std::exception& e) {
      out = KubeResponse{};
      out.error = std::string("call failed: ") + e.what();
    }
    if (c.timed_out && out.error.empty() == false) out.error = on_line && out.status == 200 ? "idle" : "timeout";
    if (c.cancelled) out.error = "cancelled";
    c.timer.cancel();
    c.close();
    open.erase(&c);
    co_return out;
  }
};

KubeClient::KubeClient(asio::io_context& io, KubernetesConfig config)
    : config_(std::move(config)), impl_(std::make_unique<Impl>(io)) {
  std::string error;
  impl_->server = parseHttpUrl(config_.api_server, &error, true);
  if (!impl_->server) {
    impl_->setup_error = "kubernetes.api_server: " + error;
    return;
  }
  boost::system::error_code ec;
  if (config_.ca_file.empty()) impl_->tls.set_default_verify_paths(ec);
  else impl_->tls.load_verify_file(config_.ca_file, ec);
  if (ec) impl_->setup_error = "kubernetes.ca_file " + config_.ca_file + ": " + ec.message();
  impl_->tls.set_verify_mode(asio::ssl::verify_peer);
}

KubeClient::~KubeClient() = default;

asio::awaitable<KubeResponse> KubeClient::call(std::string_view method, std::string target, std::string body,
                                               std::string_view content_type) {
  co_return co_await impl_->run(cancelled_, config_, method, std::move(target), std::move(body), content_type, Millis(0), nullptr);
}

asio::awaitable<KubeResponse> KubeClient::stream(std::string target, Millis idle,
                                                 std::function<bool(std::string_view line)> on_line) {
  co_return co_await impl_->run(cancelled_, config_, "GET", std::move(target), {}, {}, idle, &on_line);
}

asio::io_context& KubeClient::io() { return impl_->io; }

void KubeClient::cancel() {
  cancelled_ = true;
  for (Conn* c : impl_->open) {
    c->cancelled = true;
    c->close();
  }
}

}  // namespace tahua
