#include "server/realtime_relay.h"

#include <openssl/ssl.h>

#include <chrono>
#include <memory>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "core/json_read.h"
#include "core/log.h"
#include "filters/filter.h"
#include "providers/cloud_token.h"
#include "server/any_stream.h"
#include "server/upstream_client.h"
#include "telemetry/metrics.h"
#include "translate/json_util.h"

namespace tahua {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace bj = boost::json;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// Both sides, plain or TLS, are one type: Beast's WebSocket is compiled once (any_stream.h).
using WebSocket = websocket::stream<AnyStream>;

bool addRealtimeUsage(std::string_view event, Usage& usage) {
  if (event.find("\"response.done\"") == std::string_view::npos) return false;
  boost::system::error_code ec;
  const bj::value v = readJson(event, ec);
  if (ec || !v.is_object() || json::strOr(v.get_object(), "type", "") != "response.done") return false;
  const bj::object* response = json::obj(v.get_object(), "response");
  const bj::object* u = response ? json::obj(*response, "usage") : nullptr;
  if (!u) return true;
  auto plus = [](std::int64_t& to, std::optional<std::int64_t> n) {
    if (n) to = std::max<std::int64_t>(to, 0) + *n;
  };
  plus(usage.prompt_tokens, json::integer(*u, "input_tokens"));
  plus(usage.completion_tokens, json::integer(*u, "output_tokens"));
  if (const bj::object* d = json::obj(*u, "input_token_details")) plus(usage.cached_tokens, json::integer(*d, "cached_tokens"));
  usage.total_tokens = std::max<std::int64_t>(usage.prompt_tokens, 0) + std::max<std::int64_t>(usage.completion_tokens, 0);
  return true;
}

namespace {

// The Realtime protocol's error event.
std::string errorEvent(const Error& e) {
  return bj::serialize(bj::object{{"type", "error"},
                                  {"event_id", nullptr},
                                  {"error", bj::object{{"type", e.httpStatus() == 429 ? "rate_limit_error" : "invalid_request_error"},
                                                       {"code", e.code()},
                                                       {"message", e.message},
                                                       {"param", nullptr},
                                                       {"event_id", nullptr}}}});
}

// The subprotocol to answer with: "realtime" when the client offered it (the browser
// SDK offers it beside its key), else none.
std::string chooseSubprotocol(std::string_view offered) {
  while (!offered.empty()) {
    const auto comma = offered.find(',');
    std::string_view p = offered.substr(0, comma);
    while (!p.empty() && p.front() == ' ') p.remove_prefix(1);
    while (!p.empty() && p.back() == ' ') p.remove_suffix(1);
    if (p == "realtime") return std::string(p);
    if (comma == std::string_view::npos) break;
    offered.remove_prefix(comma + 1);
  }
  return {};
}

// Closes `socket` if `timer` fires first (connect, TLS and WebSocket handshakes).
void guard(asio::steady_timer& timer, tcp::socket& socket, Millis limit, bool& expired) {
  timer.expires_after(limit);
  timer.async_wait([&socket, &expired](boost::system::error_code ec) {
    if (ec) return;
    expired = true;
    boost::system::error_code ignored;
    socket.close(ignored);
  });
}

struct Shared {
  Clock::time_point last;       // the last frame either way
  int running = 0;              // pumps still running
  std::optional<asio::steady_timer> wake;  // the main coroutine's wait, cancelled to wake it
  std::string why;              // what ended it
  std::optional<websocket::close_reason> forward;  // the peer's close, passed on
  bool over_budget = false;
  bool stop = false;
  void poke() {
    if (wake) wake->cancel();
  }
};

asio::awaitable<void> pumpUp(WebSocket& client, WebSocket& up, RequestContext& ctx, FilterChain& chain, std::shared_ptr<Shared> s) {
  beast::flat_buffer buf;
  for (;;) {
    auto [ec, n] = co_await up.async_read(buf, kTuple);
    if (ec || s->stop) {
      if (ec == websocket::error::closed) s->forward = up.reason();
      if (s->why.empty()) s->why = ec == websocket::error::closed ? "upstream closed" : "upstream failed";
      break;
    }
    s->last = Clock::now();
    const bool text = up.got_text();
    const std::string_view data(static_cast<const char*>(buf.data().data()), buf.size());
    bool over = false;
    if (text && addRealtimeUsage(data, ctx.usage) && chain.wantsResponseData()) {
      // The usage so far is reported to the filters (an empty piece): the rate limits
      // may end a session over its budget.
      ResponseData piece({}, false);
      chain.responseData(ctx, piece);
      if (piece.failed()) {
        ctx.fail(piece.takeFailure());
        over = true;
      }
    }
    client.text(text);
    auto [wec, wn] = co_await client.async_write(buf.data(), kTuple);
    if (wec) {
      if (s->why.empty()) s->why = "client gone";
      break;
    }
    if (!ctx.first_byte) ctx.first_byte = Clock::now();
    ctx.bytes_out += n;
    ++ctx.chunks_out;
    buf.consume(n);
    if (over) {
      s->over_budget = true;
      s->why = "over budget";
      break;
    }
  }
  --s->running;
  s->poke();
}

asio::awaitable<void> pumpDown(WebSocket& client, WebSocket& up, RequestContext& ctx, std::shared_ptr<Shared> s) {
  beast::flat_buffer buf;
  for (;;) {
    auto [ec, n] = co_await client.async_read(buf, kTuple);
    if (ec || s->stop) {
      if (ec == websocket::error::closed) {
        s->forward = client.reason();
        if (s->why.empty()) s->why = "client closed";
      } else if (s->why.empty()) {
        s->why = "client gone";
      }
      break;
    }
    s->last = Clock::now();
    up.text(client.got_text());
    auto [wec, wn] = co_await up.async_write(buf.data(), kTuple);
    if (wec) {
      if (s->why.empty()) s->why = "upstream failed";
      break;
    }
    ctx.bytes_in += n;
    buf.consume(n);
  }
  --s->running;
  s->poke();
}

asio::awaitable<void> relayFrames(WebSocket& client, WebSocket& up, RequestContext& ctx, RealtimeHost& host) {
  const ServerConfig& cfg = ctx.config->server;
  auto ex = co_await asio::this_coro::executor;
  auto s = std::make_shared<Shared>();
  s->last = Clock::now();
  s->wake.emplace(ex);
  s->running = 2;
  const auto start = Clock::now();
  std::string drain_reason;
  host.onCloseRequest([s, &drain_reason](std::string_view reason) {
    drain_reason = reason;
    s->poke();
  });
  asio::co_spawn(ex, pumpUp(client, up, ctx, host.chain(), s), asio::detached);
  asio::co_spawn(ex, pumpDown(client, up, ctx, s), asio::detached);
  // Waits until a pump ends, the session idles or lasts too long, or a drain asks.
  websocket::close_reason to_client{websocket::close_code::normal};
  for (;;) {  // (checked before each wait: a poke with no wait pending is lost)
    if (s->running < 2) {
      if (s->forward) to_client = *s->forward;
      if (s->over_budget) to_client = websocket::close_reason(websocket::close_code::policy_error, "over budget");
      break;
    }
    if (!drain_reason.empty()) {
      s->why = "drain";
      to_client = websocket::close_reason(websocket::close_code::going_away, drain_reason);
      break;
    }
    const auto now = Clock::now();
    if (now >= start + cfg.realtime_max_duration) {
      s->why = "max duration";
      to_client = websocket::close_reason(websocket::close_code::going_away, "The session reached the gateway's time limit.");
      break;
    }
    if (now >= s->last + cfg.realtime_idle_timeout) {
      s->why = "idle";
      to_client = websocket::close_reason(websocket::close_code::going_away, "The session was idle too long.");
      break;
    }
    s->wake->expires_at(std::min(s->last + cfg.realtime_idle_timeout, start + cfg.realtime_max_duration));
    co_await s->wake->async_wait(kTuple);
  }
  host.onCloseRequest(nullptr);
  s->stop = true;
  // Ends both sides: an error event first when the budget ended it, then close frames
  // (bounded: a peer that does not answer is cut), then the sockets.
  asio::steady_timer cut(ex);
  bool cut_expired = false;
  guard(cut, client.next_layer().socket(), Millis(2000), cut_expired);
  if (s->over_budget && ctx.error && client.is_open()) {
    const std::string event = errorEvent(*ctx.error);
    client.text(true);
    co_await client.async_write(asio::buffer(event), kTuple);
  }
  if (client.is_open() && s->why != "client closed" && s->why != "client gone") co_await client.async_close(to_client, kTuple);
  if (up.is_open()) {
    asio::steady_timer up_cut(ex);
    bool up_expired = false;
    guard(up_cut, up.next_layer().socket(), Millis(2000), up_expired);
    co_await up.async_close(websocket::close_code::normal, kTuple);
    up_cut.cancel();
  }
  cut.cancel();
  boost::system::error_code ignored;
  up.next_layer().socket().close(ignored);
  client.next_layer().socket().close(ignored);
  // The pumps hold references into this frame: wait until both returned.
  while (s->running > 0) {
    s->wake->expires_after(std::chrono::seconds(1));
    co_await s->wake->async_wait(kTuple);
  }
  log::info("realtime session ended", {{"request_id", ctx.request_id}, {"why", s->why},
                                       {"prompt_tokens", ctx.usage.prompt_tokens}, {"completion_tokens", ctx.usage.completion_tokens}});
}

// The provider's realtime URL target and auth header, as its adapter's kind says.
std::string upstreamTarget(const ProviderConfig& p, const RequestContext& ctx) {
  const std::string& model = ctx.deployment && !ctx.deployment->upstream_model.empty() ? ctx.deployment->upstream_model : ctx.facts.model;
  if (p.type == "azure-openai") return p.base_path + "/realtime?api-version=" + p.api_version + "&deployment=" + model;
  return p.base_path + "/realtime?model=" + model;
}

asio::awaitable<void> acceptAndRelay(AnyStream client_stream, const http::request<RequestBody>& request,
                                     RequestContext& ctx, WebSocket& up, RealtimeHost& host, WorkerMetrics& metrics) {
  WebSocket client(std::move(client_stream));
  const std::string protocol = chooseSubprotocol(request[http::field::sec_websocket_protocol]);
  const std::string request_id(host.requestId());
  client.set_option(websocket::stream_base::decorator([&](websocket::response_type& r) {
    r.set(http::field::server, "tahua");
    r.set("x-request-id", request_id);
    if (!protocol.empty()) r.set(http::field::sec_websocket_protocol, protocol);
  }));
  client.read_message_max(ctx.config->server.realtime_max_frame_bytes);
  up.read_message_max(ctx.config->server.realtime_max_frame_bytes);
  auto [aec] = co_await client.async_accept(request, kTuple);
  if (aec) {
    ctx.status = 499;
    co_return;
  }
  ctx.status = 101;
  ctx.streaming = true;
  ++metrics.realtime_sessions;
  ++metrics.realtime_sessions_total;
  co_await relayFrames(client, up, ctx, host);
  --metrics.realtime_sessions;
}

asio::awaitable<void> relayOver(AnyStream client, const http::request<RequestBody>& request, RequestContext& ctx,
                                const ProviderRuntime& provider, UpstreamEnv& env, RealtimeHost& host) {
  const ProviderConfig& p = *provider.config;
  auto ex = co_await asio::this_coro::executor;
  const ProviderTimeouts& t = p.timeouts;
  auto fail = [&](ErrorKind kind, std::string message) -> Error { return Error{kind, std::move(message)}; };
  // 0. A provider with a cloud credential (Entra ID) is called with its current token,
  // waited for as an HTTP attempt waits; without one the session is refused as such an
  // attempt fails (503, saying why), never opened without credentials.
  std::string bearer;
  if (cloud_auth::TokenSlot* slot = provider.adapter->tokenSlot()) {
    auto token = co_await awaitCloudToken(*slot, p);
    if (auto* error = std::get_if<Error>(&token)) {
      ctx.fail(std::move(*error));
      co_await host.refuse(ctx);
      co_return;
    }
    bearer = std::move(std::get<std::string>(token));
  } else if (p.azure.entra()) {  // its credential is not usable (an unset secret): no token will come
    ctx.fail(fail(ErrorKind::ProviderUnavailable, "The " + p.type + " provider '" + p.name +
                                                      "' has no access token: its Entra ID credential is not configured."));
    co_await host.refuse(ctx);
    co_return;
  }
  // 1. The provider's socket (its own, not the pool's: a session holds it for minutes).
  tcp::resolver resolver(ex);
  auto [rec, results] = co_await resolver.async_resolve(p.host, std::to_string(p.port), kTuple);
  if (rec) {
    ctx.fail(fail(ErrorKind::UpstreamConnect, "Could not resolve the upstream host for provider '" + p.name + "'."));
    co_await host.refuse(ctx);
    co_return;
  }
  tcp::socket socket(ex);
  asio::steady_timer timer(ex);
  bool expired = false;
  guard(timer, socket, t.connect, expired);
  auto [cec, ep] = co_await asio::async_connect(socket, results, kTuple);
  timer.cancel();
  if (cec) {
    ctx.fail(expired ? fail(ErrorKind::UpstreamTimeout, "The upstream did not accept the connection in time (connect timeout).")
                     : fail(ErrorKind::UpstreamConnect, "Could not connect to the upstream for provider '" + p.name + "'."));
    co_await host.refuse(ctx);
    co_return;
  }
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  const std::string target = upstreamTarget(p, ctx);
  const std::string host_header = hostHeader(p);
  std::string_view beta = ctx.headers ? ctx.headers->get("openai-beta") : std::string_view{};
  const std::string openai_beta(beta);
  auto decorate = [&p, openai_beta, bearer](websocket::request_type& r) {
    r.set(http::field::user_agent, "tahua/0.1");
    if (!bearer.empty()) {
      r.set(http::field::authorization, "Bearer " + bearer);
    } else if (p.type == "azure-openai") {
      if (!p.api_key.empty()) r.set("api-key", p.api_key);
    } else if (!p.api_key.empty()) {
      r.set(http::field::authorization, "Bearer " + p.api_key);
    }
    if (!openai_beta.empty()) r.set("OpenAI-Beta", openai_beta);
    for (const auto& [name, value] : p.headers) r.set(name, value);
  };
  // 2. TLS when the provider is https, then the WebSocket handshake; a refusal is
  // answered over HTTP, before the client's upgrade is accepted.
  auto handshake = [&](WebSocket& ws) -> asio::awaitable<bool> {
    ws.set_option(websocket::stream_base::decorator(decorate));
    websocket::response_type res;
    expired = false;
    guard(timer, ws.next_layer().socket(), t.first_byte, expired);
    auto [hec] = co_await ws.async_handshake(res, host_header, target, kTuple);
    timer.cancel();
    if (!hec) co_return true;
    const int status = static_cast<int>(res.result_int());
    if (expired) ctx.fail(fail(ErrorKind::UpstreamTimeout, "The upstream did not answer the realtime handshake in time."));
    else if (status == 429) ctx.fail(Error{ErrorKind::RateLimited, "The provider is rate limiting realtime sessions; retry later."});
    else if (status > 0)
      ctx.fail(fail(ErrorKind::UpstreamBadResponse, "The provider refused the realtime session (HTTP " + std::to_string(status) + ")."));
    else ctx.fail(fail(ErrorKind::UpstreamConnect, "The realtime handshake with provider '" + p.name + "' failed."));
    co_return false;
  };
  std::optional<AnyStream> upstream;
  if (p.https) {
    asio::ssl::stream<tcp::socket> tls(std::move(socket), *provider.tls);
    boost::system::error_code aec;
    asio::ip::make_address(p.host, aec);
    if (aec) SSL_set_tlsext_host_name(tls.native_handle(), p.host.c_str());
    if (p.tls_verify) tls.set_verify_callback(asio::ssl::host_name_verification(p.host));
    expired = false;
    guard(timer, tls.next_layer(), t.connect, expired);
    auto [tec] = co_await tls.async_handshake(asio::ssl::stream_base::client, kTuple);
    timer.cancel();
    if (tec) {
      ctx.fail(fail(ErrorKind::UpstreamTls, "TLS handshake with the upstream for provider '" + p.name + "' failed."));
      co_await host.refuse(ctx);
      co_return;
    }
    upstream.emplace(anyStream<asio::ssl::stream<tcp::socket>>(std::move(tls)));
  } else {
    upstream.emplace(anyStream<tcp::socket>(std::move(socket)));
  }
  WebSocket ws(std::move(*upstream));
  if (!co_await handshake(ws)) {
    co_await host.refuse(ctx);
    co_return;
  }
  co_await acceptAndRelay(std::move(client), request, ctx, ws, host, env.metrics);
}

}  // namespace

template <class Stream>
asio::awaitable<void> relayRealtime(Stream& client, const http::request<RequestBody>& request, RequestContext& ctx,
                                    const ProviderRuntime& provider, UpstreamEnv& env, RealtimeHost& host) {
  co_await relayOver(anyStream<Stream&>(client), request, ctx, provider, env, host);
}

template asio::awaitable<void> relayRealtime<tcp::socket>(tcp::socket&, const http::request<RequestBody>&, RequestContext&,
                                                          const ProviderRuntime&, UpstreamEnv&, RealtimeHost&);
template asio::awaitable<void> relayRealtime<asio::ssl::stream<tcp::socket>>(asio::ssl::stream<tcp::socket>&,
                                                                            const http::request<RequestBody>&, RequestContext&,
                                                                            const ProviderRuntime&, UpstreamEnv&, RealtimeHost&);

}  // namespace tahua
