// One client connection: reads requests (keep-alive, pipelining), runs each through
// the filter chain and the upstream exchange, and writes the answer. Streams are
// relayed piece by piece as they arrive; nothing is buffered beyond one read.
#include "server/session.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <span>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/log.h"
#include "core/temp_file.h"
#include "http/query.h"
#include "filters/filter.h"
#include "providers/translation.h"
#include "server/attempt_loop.h"
#include "server/deadline.h"
#include "server/http_head.h"
#include "server/realtime_relay.h"
#include "server/request_body.h"
#include "server/session_host.h"
#include "server/stream_writer.h"
#include "server/upload_spool.h"
#include "server/upstream_client.h"
#include "telemetry/metrics.h"

namespace tahua {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);

namespace {

class BeastHeaders final : public HeaderView {
 public:
  explicit BeastHeaders(const http::fields& f) : f_(f) {}
  // A scan in arrival order, lengths first: a request has a handful of fields, and
  // Beast's ordered lookup compares names case-insensitively at every node of its tree
  // (callgrind: 570 instructions to find Authorization among 6 fields). The first of
  // repeated fields wins, as with find().
  std::string_view get(std::string_view name) const override {
    for (const auto& f : f_) {
      const std::string_view n = f.name_string();
      if (n.size() == name.size() && beast::iequals(n, name)) return f.value();
    }
    return {};
  }

 private:
  const http::fields& f_;
};

enum class Route { Api, Healthz, Readyz, Metrics, NotFound };

struct RouteMatch {
  Route route = Route::NotFound;
  Endpoint endpoint = Endpoint::None;
  http::verb method = http::verb::unknown;  // the method the path accepts
  http::verb also = http::verb::unknown;    // and a second one, if any
  http::verb third = http::verb::unknown;   // and a third (an MCP server's own path)
  bool accepts(http::verb m) const {
    return m == method || (also != http::verb::unknown && m == also) || (third != http::verb::unknown && m == third);
  }
};

RouteMatch matchRoute(std::string_view path) {
  if (path == "/v1/chat/completions") return {Route::Api, Endpoint::ChatCompletions, http::verb::post};
  if (path == "/v1/completions") return {Route::Api, Endpoint::Completions, http::verb::post};
  if (path == "/v1/embeddings") return {Route::Api, Endpoint::Embeddings, http::verb::post};
  if (path == "/v1/moderations") return {Route::Api, Endpoint::Moderations, http::verb::post};
  if (path == "/v1/images/generations") return {Route::Api, Endpoint::ImagesGenerations, http::verb::post};
  if (path == "/v1/rerank") return {Route::Api, Endpoint::Rerank, http::verb::post};
  if (path == "/v1/audio/transcriptions") return {Route::Api, Endpoint::AudioTranscriptions, http::verb::post};
  if (path == "/v1/audio/translations") return {Route::Api, Endpoint::AudioTranslations, http::verb::post};
  if (path == "/v1/audio/speech") return {Route::Api, Endpoint::AudioSpeech, http::verb::post};
  if (path == "/v1/images/edits") return {Route::Api, Endpoint::ImagesEdits, http::verb::post};
  if (path == "/v1/models") return {Route::Api, Endpoint::Models, http::verb::get};
  if (path == "/v1/responses") return {Route::Api, Endpoint::Responses, http::verb::post};
  if (path == "/v1/messages") return {Route::Api, Endpoint::Messages, http::verb::post};
  if (path == "/v1/messages/count_tokens") return {Route::Api, Endpoint::CountTokens, http::verb::post};
  if (path == "/v1/realtime") return {Route::Api, Endpoint::Realtime, http::verb::get};
  // The MCP gateway (Streamable HTTP). No GET: the merged endpoint opens no server-wide
  // stream of its own (a 405 is the transport's way to say so); a call's own stream
  // carries its progress.
  if (path == "/mcp") return {Route::Api, Endpoint::Mcp, http::verb::post, http::verb::delete_};
  // One server's own endpoint, /mcp/{server}: its names as it gives them, and its
  // server-initiated stream (GET) relayed.
  if (path.starts_with("/mcp/")) {
    const std::string_view server = path.substr(5);
    if (server.empty() || server.size() > 64 ||
        server.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != std::string_view::npos)
      return {};
    return {Route::Api, Endpoint::Mcp, http::verb::post, http::verb::delete_, http::verb::get};
  }
  if (path == "/v1/files") return {Route::Api, Endpoint::Files, http::verb::post, http::verb::get};
  if (path == "/v1/batches") return {Route::Api, Endpoint::Batches, http::verb::post, http::verb::get};
  // /v1/files/{id}[/content], /v1/batches/{id}[/cancel]: an id of letters, digits, - and _.
  for (const std::string_view prefix : {std::string_view("/v1/files/"), std::string_view("/v1/batches/")}) {
    if (!path.starts_with(prefix)) continue;
    std::string_view id = path.substr(prefix.size());
    std::string_view rest;
    if (const auto slash = id.find('/'); slash != std::string_view::npos) {
      rest = id.substr(slash);
      id = id.substr(0, slash);
    }
    if (id.empty() || id.size() > 128 || id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != std::string_view::npos)
      return {};
    const bool files = prefix.size() == 10;
    if (rest.empty())
      return files ? RouteMatch{Route::Api, Endpoint::FileObject, http::verb::get, http::verb::delete_}
                   : RouteMatch{Route::Api, Endpoint::BatchObject, http::verb::get};
    if (files && rest == "/content") return {Route::Api, Endpoint::FileContent, http::verb::get};
    if (!files && rest == "/cancel") return {Route::Api, Endpoint::BatchCancel, http::verb::post};
    return {};
  }
  // A stored response: /v1/responses/{id} and /v1/responses/{id}/input_items.
  if (path.size() > 14 && path.substr(0, 14) == "/v1/responses/")
    return {Route::Api, Endpoint::StoredResponse, http::verb::get, http::verb::delete_};
  if (path == "/healthz") return {Route::Healthz, Endpoint::None, http::verb::get};
  if (path == "/readyz") return {Route::Readyz, Endpoint::None, http::verb::get};
  if (path == "/metrics") return {Route::Metrics, Endpoint::None, http::verb::get};
  return {};
}

// The path of the request line at the start of `head` ("POST /v1/files?x HTTP/1.1"),
// before Beast parses it: an upload's body limit is the path's, and Beast checks a
// declared Content-Length against the limit while it parses the head.
std::string_view requestLinePath(std::string_view head) {
  const std::size_t start = head.find(' ');
  if (start == std::string_view::npos) return {};
  const std::size_t end = head.find_first_of(" ?\r\n", start + 1);
  return head.substr(start + 1, end == std::string_view::npos ? std::string_view::npos : end - start - 1);
}

bool validRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':')) return false;
  return true;
}

template <class Stream>
class Session final : public SessionBase, private Resumer, private AttemptHost, private StreamWriterOwner, private RealtimeHost {
 public:
  Session(SessionHost& worker, Stream stream, bool admin)
      : worker_(worker), stream_(std::move(stream)), deadline_(lowest()), admin_(admin), writer_(stream_, deadline_, *this) {}

  asio::awaitable<void> run() {
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

  void closeIfIdle() override {
    if (realtime_close_) realtime_close_("The gateway is shutting down.");  // a drain: a close frame says why
    if (!idle_) return;
    beast::error_code ignored;
    lowest().close(ignored);
  }

  void abortForDrain() override {
    if (exchange_) exchange_->abort();
    else if (idle_) closeIfIdle();
  }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

  tcp::socket& lowest() {
    if constexpr (kTls) return stream_.next_layer();
    else return stream_;
  }
  // Settings of the snapshot pinned for the current request.
  const ServerConfig& serverConfig() const { return snapshot_->config->server; }

  // Reads one request and answers it. Returns whether the connection stays open.
  //
  // Note for GCC 12: never pass a temporary with a destructor (an Error{...}, a
  // std::string made from a literal) as an argument inside a co_await expression; GCC 12
  // can destroy it twice. Build a named local and pass that.
  asio::awaitable<bool> readAndServe() {
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

  // Reads head and body (an upload's head only: its body is read after the header
  // filters ran, receiveBody). On failure returns the error to answer with, or an
  // Internal error meaning "just close" (slow or vanished clients get no answer).
  asio::awaitable<std::optional<Error>> readRequest(http::request_parser<RequestBody>& parser) {
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
    // Only "chunked" is a body framing we accept; anything else could be read
    // differently by another hop (request smuggling).
    if (auto te = head[http::field::transfer_encoding]; !te.empty() && !beast::iequals(te, "chunked"))
      co_return Error{ErrorKind::BadHttp, "Unsupported Transfer-Encoding."};
    if (head.target().empty() || head.target().front() != '/')
      co_return Error{ErrorKind::BadHttp, "The request target must be an absolute path."};
    if (head.target().size() > cfg.max_url_bytes) co_return uriTooLong(cfg);
    // RFC 9112 3.2: an HTTP/1.1 request has exactly one Host; no request has two.
    if (const auto hosts = head.count(http::field::host); hosts > 1 || (hosts == 0 && head.version() >= 11))
      co_return Error{ErrorKind::BadHttp, hosts > 1 ? "The request has more than one Host header." : "The request has no Host header."};
    if (parser.is_done() || upload_) co_return std::nullopt;
    co_return co_await readBody(parser, cfg.body_timeout);
  }

  static constexpr std::size_t kUploadReadBytes = 64 * 1024;  // Beast reads at most this at once

  Error tooLarge() const {
    return Error{ErrorKind::BodyTooLarge, "Request body is larger than " + std::to_string(body_limit_) + " bytes."};
  }

  // The body after the head: into memory, or to the body's sink when it has one.
  asio::awaitable<std::optional<Error>> readBody(http::request_parser<RequestBody>& parser, Millis timeout) {
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

  static Error uriTooLong(const ServerConfig& cfg) {
    return Error{ErrorKind::UriTooLong, "The request URL is longer than " + std::to_string(cfg.max_url_bytes) + " bytes."};
  }

  // Reads until the whole request head is in buffer_, and checks what Beast's parser
  // would accept silently: obs-fold (a header line continued on the next, which RFC 9112
  // 5.2 says a server must reject or replace; other hops may read it differently) and a
  // request line longer than the URL bound (414 rather than the headers' 431). The usual
  // head arrived whole with the first read: that costs no coroutine (checkHead).
  asio::awaitable<std::optional<Error>> readWholeHead(const ServerConfig& cfg) {
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
  bool checkHead(const ServerConfig& cfg, std::size_t& scanned, std::optional<Error>& bad) {
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

  // Note on coroutine frames: a frame holds every local of every branch for the life of
  // the call, and a held stream keeps its whole chain of frames. The API path therefore
  // has a frame of its own, with one RequestContext; local answers are another call.
  asio::awaitable<void> serve(http::request<RequestBody>& req, Clock::time_point received) {
    std::string_view target = req.target();
    std::string_view path = target.substr(0, target.find('?'));
    RouteMatch match = matchRoute(path);
    // /mcp exists once some provider is an MCP server.
    if (match.endpoint == Endpoint::Mcp && snapshot_->config->mcp.targets.empty()) match = {};
    std::string_view incoming_id = req["x-request-id"];
    request_id_ = validRequestId(incoming_id) ? std::string(incoming_id) : worker_.nextRequestId();
    // HEAD is GET without the body (RFC 9110 9.3.2); every answer to it, errors
    // included and on the admin listener too, has none, or a keep-alive client would
    // read the body as the next answer.
    head_only_ = req.method() == http::verb::head;
    const http::verb method = head_only_ && match.method == http::verb::get ? http::verb::get : req.method();
    if (admin_ || match.route != Route::Api || !match.accepts(method)) {
      co_await serveLocal(req, received, path, match, method);
      co_return;
    }
    RequestContext ctx = newContext(req, received, path, match.endpoint);
    BeastHeaders headers(req);
    ctx.headers = &headers;
    ctx.body = std::move(req.body().text);
    request_fields_ = &req;
    if (match.endpoint == Endpoint::Realtime) {
      // The session's model is in the query: the filters get it as a body (routing,
      // limits and plugins read it as they read any request). The connection ends with it.
      keep_alive_ = false;
      realtime_request_ = &req;
      if (auto bad = realtimeBody(req, ctx)) {  // no upgrade, no model: answered here
        ctx.fail(std::move(*bad));
        request_fields_ = nullptr;
        realtime_request_ = nullptr;
        co_await finishLocally(ctx);
        co_return;
      }
    }
    if (watch_) watch_->gone = false;
    AttemptEnv env{*snapshot_, *chain_, worker_.upstreamEnv(), worker_.metrics()};
    co_await runAttempts(ctx, env, *this);
    request_fields_ = nullptr;
    realtime_request_ = nullptr;
    if (clientGone()) keep_alive_ = false;
  }

  // Everything answered by the gateway itself: the admin listener, health, metrics, 404, 405.
  asio::awaitable<void> serveLocal(http::request<RequestBody>& req, Clock::time_point received,
                                   std::string_view path, RouteMatch match, http::verb method) {
    if (admin_) {
      co_await serveAdmin(req, path, req.target());  // the admin API reads a few query parameters
      co_return;
    }
    if (match.route != Route::NotFound && !match.accepts(method)) {
      RequestContext ctx = newContext(req, received, path, Endpoint::None);
      ctx.fail(Error{ErrorKind::MethodNotAllowed,
                     "Method " + std::string(req.method_string()) + " is not allowed on " + std::string(path) + "."});
      const std::string_view allow = match.endpoint == Endpoint::Mcp        ? std::string_view(match.third == http::verb::get ? "GET, POST, DELETE" : "POST, DELETE")
                                     : match.also == http::verb::delete_ ? std::string_view("GET, DELETE")
                                     : match.also == http::verb::get    ? std::string_view("GET, POST")
                                                                        : std::string_view(http::to_string(match.method));
      co_await finishLocally(ctx, allow);
      co_return;
    }
    switch (match.route) {
      case Route::Healthz:
        co_await writeSimple(200, "application/json", R"({"status":"ok"})");
        co_return;
      case Route::Readyz: {
        const SessionHost::Readiness r = worker_.readiness(*snapshot_->config);
        std::string body = r.ready ? R"({"status":"ready")" : worker_.gatewayDraining() ? R"({"status":"draining")" : R"({"status":"not_ready")";
        if (!r.models.empty()) body.append(",\"models\":{").append(r.models).append("}");
        if (!r.resources_listed) body.append(",\"kubernetes_resources\":\"not_listed\"");
        body += '}';
        co_await writeSimple(r.ready ? 200 : 503, "application/json", body);
        co_return;
      }
      case Route::Metrics: {
        std::string text = co_await worker_.renderMetrics();
        co_await writeSimple(200, "text/plain; version=0.0.4; charset=utf-8", text);
        co_return;
      }
      case Route::Api:  // not reached: serve() answers it
      case Route::NotFound: {
        RequestContext ctx = newContext(req, received, path, Endpoint::None);
        ctx.fail(Error{ErrorKind::UnknownPath, "Unknown request URL: " + std::string(req.method_string()) + " " +
                                                   std::string(path) + "."});
        co_await finishLocally(ctx);
        co_return;
      }
    }
  }

  // The admin listener: its own small API, answered by the gateway (src/admin/).
  asio::awaitable<void> serveAdmin(http::request<RequestBody>& req, std::string_view path, std::string_view target) {
    if (path == "/healthz") {
      co_await writeSimple(200, "application/json", R"({"status":"ok"})");
      co_return;
    }
    std::string_view method = req.method_string();
    std::string_view auth = req[http::field::authorization];
    std::string& body = req.body().text;
    AdminReply reply = co_await worker_.admin(method, target, auth, body);
    log::info("admin request", {{"method", method}, {"path", path}, {"status", reply.status}, {"request_id", request_id_}});
    co_await writeSimple(reply.status, reply.content_type, reply.body);
  }

  RequestContext newContext(const http::request<RequestBody>& req, Clock::time_point received,
                            std::string_view path, Endpoint endpoint) {
    RequestContext ctx;
    ctx.config = snapshot_->config;
    ctx.worker_id = worker_.id();
    ctx.request_id = request_id_;
    ctx.endpoint = endpoint;
    ctx.method = req.method_string();
    ctx.path = path;
    if (auto q = req.target().find('?'); q != std::string_view::npos) ctx.query = req.target().substr(q + 1);
    ctx.bytes_in = req.body().text.size();
    ctx.start = received;
    // Every filter's State for this request, in a block reused across requests.
    const std::size_t bytes = chain_->stateBytes();
    if (state_block_size_ < bytes) {
      state_block_.reset(new std::max_align_t[(bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t)]);
      state_block_size_ = bytes;
    }
    chain_->begin(ctx, reinterpret_cast<std::byte*>(state_block_.get()));
    ctx.resumer = this;
    resumed_.reset();  // each request's resumes are its own
    return ctx;
  }

  // A Realtime request: a WebSocket upgrade naming a plain model; ctx.body becomes
  // {"model":...,"stream":true} (a session streams).
  static std::optional<Error> realtimeBody(const http::request<RequestBody>& req, RequestContext& ctx) {
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
  asio::awaitable<void> relayRealtime(RequestContext& ctx, const ProviderRuntime& provider) override {
    const std::string& type = provider.config->type;
    if (type != "openai" && type != "azure-openai") {
      ctx.fail(Error{ErrorKind::InvalidRequest, "The /v1/realtime endpoint is not supported by provider type '" + type +
                                                    "' (model '" + ctx.facts.model + "')."});
      co_await writeError(ctx);
      co_return;
    }
    co_await tahua::relayRealtime(stream_, *realtime_request_, ctx, provider, worker_.upstreamEnv(), *this);
    // The connection ends with the session (keep_alive_ is off since serve()).
  }

  // RealtimeHost.
  asio::awaitable<void> refuse(RequestContext& ctx) override { co_await writeError(ctx); }
  void onCloseRequest(std::function<void(std::string_view)> close) override { realtime_close_ = std::move(close); }
  FilterChain& chain() override { return *chain_; }
  std::string_view requestId() const override { return request_id_; }

  // Resumer: a filter that paused the request calls this (on this worker's thread).
  void resume(FilterStatus status) override {
    resumed_ = status;
    if (resume_event_) resume_event_->cancel();
  }

  // AttemptHost: an upload's body waits in the socket (see readAndServe).
  bool bodyPending() const override { return upload_parser_ != nullptr && !spool_; }

  // AttemptHost: reads the upload's body into its spool, now that the header filters let
  // it through, and gives the filters its text fields as the body (request/upload.h).
  asio::awaitable<std::optional<Error>> receiveBody(RequestContext& ctx) override {
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

  // A request phase that a filter paused: waits for each resume and goes on from the
  // filter after the paused one. Only requests that pause pay for this coroutine.
  asio::awaitable<FilterStatus> finishPausedPhase(RequestPhase phase, RequestContext& ctx, std::size_t next) override {
    FilterStatus status = FilterStatus::Pause;
    while (status == FilterStatus::Pause) {
      status = co_await awaitResume();
      if (status == FilterStatus::Continue) status = chain_->run(phase, ctx, next);
    }
    co_return status;
  }

  // The status a paused filter resumes with.
  asio::awaitable<FilterStatus> awaitResume() {
    while (!resumed_) {
      if (!resume_event_) resume_event_.emplace(lowest().get_executor());
      resume_event_->expires_at(Clock::time_point::max());
      co_await resume_event_->async_wait(kUseTuple);  // cancelled by resume()
    }
    const FilterStatus status = *resumed_;
    resumed_.reset();
    co_return status;
  }

  // AttemptHost: the configured fallback answer, marked with why it was given.
  asio::awaitable<void> answerFallback(RequestContext& ctx, int status, std::string_view content_type,
                                       std::string_view body, std::string_view reason) override {
    ExtraHeaders extra;
    extra.fallback = reason;
    HeaderList added;
    filterHeaders(ctx, added, extra);
    co_await writeSimple(status, content_type, body, extra);
  }

  // A request answered here (404, 405 with its Allow): its local answer, then the
  // chain's onComplete.
  asio::awaitable<void> finishLocally(RequestContext& ctx, std::string_view allow = {}) {
    co_await writeLocal(ctx, allow);
    ctx.end = Clock::now();
    chain_->complete(ctx);
  }

  // AttemptHost: writes the local reply or the error the pipeline recorded.
  asio::awaitable<void> answerLocally(RequestContext& ctx) override { co_await writeLocal(ctx, {}); }

  asio::awaitable<void> writeLocal(RequestContext& ctx, std::string_view allow) {
    ExtraHeaders extra;
    extra.allow = allow;
    HeaderList added;
    filterHeaders(ctx, added, extra);
    if (ctx.local_reply) {
      ctx.status = ctx.local_reply->status;
      ctx.first_byte = Clock::now();
      ctx.bytes_out = ctx.local_reply->body.size();
      co_await writeSimple(ctx.status, ctx.local_reply->content_type, ctx.local_reply->body, extra);
    } else {
      Error err = ctx.error ? *ctx.error : Error{ErrorKind::Internal, "Internal error."};
      ctx.status = err.httpStatus();
      std::string body = ctx.errorBody(err);
      ctx.first_byte = Clock::now();
      ctx.bytes_out = body.size();
      char seconds[16];
      if (err.retry_after_seconds > 0) {
        auto [end, ec] = std::to_chars(seconds, seconds + sizeof seconds, err.retry_after_seconds);
        extra.retry_after = std::string_view(seconds, static_cast<std::size_t>(end - seconds));
      }
      co_await writeSimple(ctx.status, "application/json", body, extra);
    }
  }

  // Watches the client while the upstream works: a client that hangs up cancels the
  // upstream at once instead of when the next write fails. A plain completion handler
  // (no coroutine, no parallel group: those cost ~15% of proxy CPU) on a state object
  // that outlives the session, since a cancelled peek may complete after it. The watch
  // starts at the worker's next watch tick (SessionHost::watchSoon): a peek that finds
  // nothing is a system call, ~6% of the CPU of a short request, which one answered
  // before the tick never pays.
  struct WatchState {
    UpstreamExchange* exchange = nullptr;
    bool wanted = false;  // a request is watching (false once it ended)
    bool armed = false;   // a peek is pending
    bool gone = false;
    unsigned request = 0;  // which request the pending peek is for
    char peeked = 0;       // the peek's buffer: it must outlive the session
  };

  // AttemptHost: the exchange in flight (null between attempts). The first one starts
  // watching; a client already gone gets its exchange aborted at once.
  void watchClient(UpstreamExchange* exchange) override {
    exchange_ = exchange;
    if (!watch_) watch_ = std::make_shared<WatchState>();
    if (watch_->gone) {
      if (exchange) exchange->abort();
      return;
    }
    watch_->exchange = exchange;
    if (!watch_->wanted && exchange) {
      watch_->wanted = true;
      ++watch_->request;
      worker_.watchSoon(this);
    }
  }

  void stopWatching() override {
    stopWatch();
    exchange_ = nullptr;
  }

  // The watch tick: the request still waits for its upstream.
  void armClientWatch() override {
    if (!watch_ || !watch_->wanted || watch_->armed) return;
    watch_->armed = true;
    lowest().async_receive(asio::buffer(&watch_->peeked, 1), tcp::socket::message_peek,
                           WatchHandler{watch_, watch_->request});
  }

  // A peek (MSG_PEEK) of one byte: Asio tries it at once only when the socket may hold
  // data, and otherwise queues it in the reactor without a system call (a plain
  // readiness wait re-registers the socket with epoll every time).
  struct WatchHandler {
    std::shared_ptr<WatchState> w;
    unsigned request;
    void operator()(beast::error_code ec, std::size_t n) {
      // The session may be gone: touch nothing but `w`. A peek of an earlier request
      // (cancelled when it ended) says nothing about this one.
      if (w->request != request) return;
      w->armed = false;
      if (!w->wanted) return;
      w->wanted = false;
      if (!ec && n > 0) return;  // a pipelined next request (or a TLS record): it stays in the socket
      w->gone = true;            // end of stream, reset, or the socket closed under us
      if (w->exchange) w->exchange->abort();  // null while waiting between retries
    }
  };

  void stopWatch() {
    if (!watch_ || !watch_->wanted) return;
    watch_->wanted = false;
    worker_.watchSoonCancel(this);
    if (!watch_->armed) return;
    watch_->armed = false;  // its handler, for an ended request, will do nothing
    beast::error_code ignored;
    lowest().cancel(ignored);  // nothing else is pending on the socket now
  }

  bool clientGone() const override { return client_gone_ || (watch_ && watch_->gone); }

  // Sleeps unless the client leaves (the watcher cannot abort a timer; it is short).
  asio::awaitable<bool> sleepFor(Millis wait) override {
    if (wait.count() == 0) co_return true;
    asio::steady_timer timer(lowest().get_executor(), wait);
    auto [ec] = co_await timer.async_wait(kUseTuple);
    co_return !ec;
  }

  // AttemptHost: the answer goes to the client; from here on nothing is retried.
  asio::awaitable<void> relay(RequestContext& ctx, UpstreamExchange& exchange, ResponseTranslator& translator,
                              ResponseHead& head, std::optional<Error> failure) override {
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
              co_await holdAnswerEnd(ctx);
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
        co_await holdAnswerEnd(ctx);
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
  bool sendStreamPiece(RequestContext& ctx, std::string_view out, bool done) {
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
  void heartbeatTick(Clock::time_point now) override {
    // A comment line would corrupt audio: bytes relayed as they come get none.
    if (writer_.active() && !raw_stream_) writer_.heartbeat(now, serverConfig().stream_heartbeat);
  }

  // The translator's error event for ctx.error, then the end of the body. The event
  // starts on a fresh line: an unfinished line or event before it is closed first (a
  // parser then sees the error, not one long line). A held-back possible start of a
  // secret is dropped.
  void endStreamWithError(RequestContext& ctx, ResponseTranslator& translator) {
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
  void streamWriteFailed() override {
    client_gone_ = true;
    if (exchange_) exchange_->abort();
  }

  // The upstream's head, accepted: the translator sees it, and the request its status.
  void acceptHead(RequestContext& ctx, ResponseTranslator& translator, ResponseHead& head) {
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
  asio::awaitable<void> relayBody(RequestContext& ctx, UpstreamExchange& exchange, ResponseTranslator& translator,
                                  ResponseHead& head) {
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
    co_await holdAnswerEnd(ctx);
    co_await writeHeadAnd(body);
  }

  // The answer-end phase (Filter::onAnswerEnd): filters that must finish something
  // before the client has the whole answer may pause it here. Free without such filters.
  asio::awaitable<void> holdAnswerEnd(RequestContext& ctx) {
    if (!chain_->holdsAnswerEnds()) co_return;
    std::size_t next = 0;
    if (chain_->run(RequestPhase::End, ctx, next) == FilterStatus::Pause)
      co_await finishPausedPhase(RequestPhase::End, ctx, next);
  }

  // Appends a piece of a body; an error past server.max_response_bytes.
  std::optional<Error> takePiece(UpstreamExchange& exchange, std::string& body, std::string_view bytes, bool done) {
    if (body.size() + bytes.size() > serverConfig().max_response_bytes) {
      exchange.abort();
      return Error{ErrorKind::UpstreamBadResponse, "The upstream response is larger than the gateway accepts."};
    }
    if (body.empty() && done) body.reserve(bytes.size() + 64);  // single piece: one allocation, padded for simdjson
    body.append(bytes);
    return std::nullopt;
  }

  // AttemptHost: an answer read whole before anything was sent (a filter judged it).
  asio::awaitable<std::optional<Error>> readAnswer(RequestContext& ctx, UpstreamExchange& exchange, ResponseTranslator& translator,
                                                   ResponseHead& head, std::string& body) override {
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
  asio::awaitable<void> relayAnswer(RequestContext& ctx, ResponseHead& head, std::string& body) override {
    ctx.response_headers = &head.headers;
    chain_->responseHeaders(ctx);
    ctx.response_headers = nullptr;
    headForBody(ctx, head, body);
    co_await holdAnswerEnd(ctx);
    co_await writeHeadAnd(body);
  }

  // A whole body's head, after the body filters (the caller writes it with the body).
  void headForBody(RequestContext& ctx, ResponseHead& head, std::string& body) {
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
  void recordUpstreamFailure(RequestContext& ctx, Error&& err) {
    if (worker_.drainDeadlinePassed())
      ctx.fail(Error{ErrorKind::Draining, "The gateway is shutting down; please retry the request."});
    else
      ctx.fail(std::move(err));
  }

  // `filtered`: onResponseHeaders already ran for this request (the upstream's head was
  // accepted, then its body failed); it runs once per request.
  asio::awaitable<void> writeError(RequestContext& ctx, bool filtered = false) {
    ctx.status = ctx.error->httpStatus();
    std::string body = ctx.errorBody(*ctx.error);
    ctx.bytes_out = body.size();
    ctx.first_byte = Clock::now();
    ExtraHeaders extra;
    HeaderList added;
    if (!filtered) filterHeaders(ctx, added, extra);
    co_await writeSimple(ctx.status, "application/json", body, extra);
  }

  // Which deployment answered, for verifying a canary's share from outside
  // (server.deployment_header; off by default).
  void deploymentHeaders(HeadWriter& h, const RequestContext& ctx) {
    // With fallbacks configured the answer names the model that gave it.
    if (ctx.requested_model && !ctx.requested_model->fallback_indices.empty() && ctx.model)
      h.header("X-Tahua-Model", ctx.model->name);
    if (!serverConfig().deployment_header || !ctx.deployment) return;
    h.header("X-Tahua-Deployment", ctx.deployment->id);
    h.header("X-Tahua-Version", ctx.deployment->version);
  }

  // Status line and the headers every response carries; the caller adds the rest.
  HeadWriter beginHead(int status) {
    HeadWriter h(head_);
    h.statusLine(status);
    h.header("Server", "tahua");
    h.header("x-request-id", request_id_);
    if (!keep_alive_) h.header("Connection", "close");
    else if (http10_) h.header("Connection", "keep-alive");
    return h;
  }

  // head_ and then `body`, in one gathered write.
  asio::awaitable<bool> writeHeadAnd(std::string_view body) {
    std::array<asio::const_buffer, 2> bufs{asio::buffer(head_), asio::buffer(body.data(), body.size())};
    deadline_.after(serverConfig().client_write_timeout);
    auto [ec, n] = co_await asio::async_write(
        stream_, std::span<const asio::const_buffer>(bufs.data(), body.empty() || head_only_ ? 1 : 2), kUseTuple);
    if (ec) client_gone_ = true;
    co_return !ec;
  }

  // Headers some answers carry, passed with the answer.
  struct ExtraHeaders {
    std::string_view allow;        // Allow of a 405
    std::string_view retry_after;  // Retry-After of a 429 / 503
    std::string_view fallback;     // X-Tahua-Fallback of a configured fallback answer
    std::span<const std::pair<std::string_view, std::string_view>> added;  // by filters
  };

  using HeaderList = std::vector<std::pair<std::string_view, std::string_view>>;

  // An answer the gateway gives itself passes the filters' onResponseHeaders too (a
  // refusal carries the rate-limit headers): what they add goes out with it.
  void filterHeaders(RequestContext& ctx, HeaderList& added, ExtraHeaders& extra) {
    ctx.response_headers = &added;
    chain_->responseHeaders(ctx);
    ctx.response_headers = nullptr;
    extra.added = added;
  }

  asio::awaitable<void> writeSimple(int status, std::string_view content_type, std::string_view body,
                                    ExtraHeaders extra = {}) {
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

  // For requests whose framing cannot be trusted: answer, then close.
  asio::awaitable<void> replyBadInput(const Error& err) {
    keep_alive_ = false;
    head_only_ = false;
    request_id_ = worker_.nextRequestId();
    const std::string body = err.toJson();
    co_await writeSimple(err.httpStatus(), "application/json", body);
  }

  asio::awaitable<void> shutdown() {
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
  asio::awaitable<void> lingeringClose() {
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

  SessionHost& worker_;  // the worker this connection runs on
  Stream stream_;
  Deadline deadline_;                    // the time limit of what the connection does now
  const bool admin_;                     // accepted on the admin listener
  SnapshotPtr snapshot_;                 // pinned for the current request
  std::shared_ptr<FilterChain> chain_;   // pinned for the current request
  beast::flat_buffer buffer_;
  bool idle_ = true;
  bool keep_alive_ = true;
  bool linger_ = false;  // the answer came before the request's body was read: lingeringClose
  bool client_gone_ = false;
  bool http10_ = false;      // the current request is HTTP/1.0
  bool head_only_ = false;   // the current request is HEAD: answers carry no body
  std::string request_id_;
  // An upload (readAndServe): its body limit, parser and spool while it is served.
  std::uint64_t body_limit_ = 0;
  bool upload_ = false;
  bool upload_keep_alive_ = false;
  http::request_parser<RequestBody>* upload_parser_ = nullptr;
  std::optional<UploadSpool> spool_;
  bool raw_stream_ = false;  // the answer being relayed is bytes as they come, not events
  // A Realtime session: its upgrade request, and how a drain closes it.
  const http::request<RequestBody>* realtime_request_ = nullptr;
  std::function<void(std::string_view)> realtime_close_;
  std::string head_;        // response head being written; its capacity is reused
  http::fields* request_fields_ = nullptr;  // the API request being served (its headers)
  std::shared_ptr<WatchState> watch_;
  UpstreamExchange* exchange_ = nullptr;
  StreamWriter<Stream> writer_;  // a relayed stream's client side
  std::string filter_ended_;  // a stream a filter ended: its last piece and the error event
  // Per-request filter State (FilterChain::begin), reused across requests.
  std::unique_ptr<std::max_align_t[]> state_block_;
  std::size_t state_block_size_ = 0;
  // Resumer (see finishPausedPhase).
  std::optional<FilterStatus> resumed_;
  std::optional<asio::steady_timer> resume_event_;
};

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
