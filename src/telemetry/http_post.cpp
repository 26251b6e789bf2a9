#include "telemetry/http_post.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

namespace tahua {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

asio::awaitable<void> post(tcp::resolver& resolver, beast::tcp_stream& stream, const HttpUrl& url,
                           http::request<http::string_body>& req, Millis timeout, HttpPostResult& out) {
  auto [rec, endpoints] = co_await resolver.async_resolve(url.host, url.port, asio::as_tuple(asio::use_awaitable));
  if (rec) {
    out.error = "resolve: " + rec.message();
    co_return;
  }
  stream.expires_after(timeout);
  auto [cec, ep] = co_await stream.async_connect(endpoints, asio::as_tuple(asio::use_awaitable));
  if (cec) {
    out.error = "connect: " + cec.message();
    co_return;
  }
  auto [wec, wn] = co_await http::async_write(stream, req, asio::as_tuple(asio::use_awaitable));
  if (wec) {
    out.error = "send: " + wec.message();
    co_return;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1 << 20);  // an answer is read and dropped; bounded
  auto [rec2, rn] = co_await http::async_read(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
  if (rec2) {
    out.error = "receive: " + rec2.message();
    co_return;
  }
  out.status = static_cast<int>(parser.get().result_int());
  beast::error_code ignored;  // closing a connection we are done with
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

}  // namespace

HttpPostResult httpPost(const HttpUrl& url, const std::vector<std::pair<std::string, std::string>>& headers,
                        std::string_view content_type, std::string body, Millis timeout) {
  asio::io_context io{1};
  tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  http::request<http::string_body> req{http::verb::post, url.target, 11};
  req.set(http::field::host, url.port == "80" ? url.host : url.host + ":" + url.port);
  req.set(http::field::user_agent, "tahua");
  req.set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) req.set(name, value);
  req.body() = std::move(body);
  req.prepare_payload();
  HttpPostResult out;
  asio::co_spawn(io, post(resolver, stream, url, req, timeout, out), asio::detached);
  // The resolver has no deadline of its own: the whole exchange gets one here.
  io.run_for(timeout + Millis(100));
  if (!io.stopped()) {
    resolver.cancel();
    beast::error_code ignored;
    stream.socket().close(ignored);
    io.run();  // let the cancelled operations finish
    if (out.status == 0 && out.error.empty()) out.error = "timed out";
  }
  return out;
}

}  // namespace tahua
