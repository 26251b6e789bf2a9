// The client connection's class, shared by the files that define its members (private
// to src/server/; everything else starts one through session.h). Its members live in
// rooms named after the part of a request's life they hold:
//
//   session.cpp          the connection and what it reads: the keep-alive loop, one
//                        request read and served, its head, body or upload's body and
//                        their limits, drain, shutdown, the lingering close after a
//                        refused body
//   session_phases.cpp   routing, the filter phases (pause and resume), local answers
//                        and errors
//   session_relay.cpp    answering from upstream: whole bodies, the stream pump,
//                        heartbeats, the answer-end hold, heads and writes, and the
//                        WebSocket upgrade of /v1/realtime (handed to realtime_relay.h)
//
// and client_watch.h (the hang-up watch, an object of its own). Each room instantiates
// the members it defines for both stream types (plain TCP and TLS) at its end, so the
// heavy Beast and Asio templates are compiled in one unit each.
//
// Note for GCC 12: never pass a temporary with a destructor (an Error{...}, a
// std::string made from a literal) as an argument inside a co_await expression; GCC 12
// can destroy it twice. Build a named local and pass that.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>

#include "filters/filter.h"
#include "net/deadline.h"
#include "server/attempt_loop.h"
#include "server/client_watch.h"
#include "server/http_head.h"
#include "server/realtime_relay.h"
#include "server/request_body.h"
#include "server/session_host.h"
#include "server/stream_writer.h"
#include "server/upload_spool.h"

namespace tahua {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);

// The two kinds of connection a Session serves.
using PlainStream = tcp::socket;
using TlsStream = asio::ssl::stream<tcp::socket>;

// What a path is served by (session_phases.cpp).
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

template <class Stream>
class Session final : public SessionBase, private Resumer, private AttemptHost, private StreamWriterOwner, private RealtimeHost {
 public:
  Session(SessionHost& worker, Stream stream, bool admin)
      : worker_(worker),
        stream_(std::move(stream)),
        deadline_(lowest()),
        admin_(admin),
        watch_(worker, *this, lowest()),
        writer_(stream_, deadline_, *this) {}

  // session.cpp: the connection.
  asio::awaitable<void> run();
  void closeIfIdle() override;
  void abortForDrain() override;

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

  tcp::socket& lowest() {
    if constexpr (kTls) return stream_.next_layer();
    else return stream_;
  }
  // Settings of the snapshot pinned for the current request.
  const ServerConfig& serverConfig() const { return snapshot_->config->server; }

  // session.cpp: the connection, reading the request and its limits.
  asio::awaitable<bool> readAndServe();
  asio::awaitable<void> shutdown();
  asio::awaitable<std::optional<Error>> readRequest(http::request_parser<RequestBody>& parser);
  static constexpr std::size_t kUploadReadBytes = 64 * 1024;  // Beast reads at most this at once
  Error tooLarge() const;
  asio::awaitable<std::optional<Error>> readBody(http::request_parser<RequestBody>& parser, Millis timeout);
  static Error uriTooLong(const ServerConfig& cfg);
  asio::awaitable<std::optional<Error>> readWholeHead(const ServerConfig& cfg);
  bool checkHead(const ServerConfig& cfg, std::size_t& scanned, std::optional<Error>& bad);
  // AttemptHost: an upload's body waits in the socket (see readAndServe).
  bool bodyPending() const override { return upload_parser_ != nullptr && !spool_; }
  asio::awaitable<std::optional<Error>> receiveBody(RequestContext& ctx) override;
  asio::awaitable<void> lingeringClose();

  // session_phases.cpp: routing, the filter phases, local answers and errors.
  asio::awaitable<void> serve(http::request<RequestBody>& req, Clock::time_point received);
  asio::awaitable<void> serveLocal(http::request<RequestBody>& req, Clock::time_point received, std::string_view path,
                                   RouteMatch match, http::verb method);
  asio::awaitable<void> serveAdmin(http::request<RequestBody>& req, std::string_view path, std::string_view target);
  RequestContext newContext(const http::request<RequestBody>& req, Clock::time_point received, std::string_view path,
                            Endpoint endpoint);
  void initContext(RequestContext& ctx, const http::request<RequestBody>& req, Clock::time_point received,
                   std::string_view path, Endpoint endpoint);
  // Resumer: a filter that paused the request calls this (on this worker's thread).
  void resume(FilterStatus status) override {
    resumed_ = status;
    if (resume_event_) resume_event_->cancel();
  }
  asio::awaitable<FilterStatus> finishPausedPhase(RequestPhase phase, RequestContext& ctx, std::size_t next) override;
  asio::awaitable<FilterStatus> awaitResume();
  asio::awaitable<void> answerFallback(RequestContext& ctx, int status, std::string_view content_type,
                                       std::string_view body, std::string_view reason) override;
  asio::awaitable<void> finishLocally(RequestContext& ctx, std::string_view allow = {});
  asio::awaitable<void> answerLocally(RequestContext& ctx) override;
  asio::awaitable<void> writeLocal(RequestContext& ctx, std::string_view allow);
  // AttemptHost: the exchange in flight (null between attempts), watched for a hang-up.
  void watchClient(UpstreamExchange* exchange) override {
    exchange_ = exchange;
    watch_.follow(exchange);
  }
  void stopWatching() override {
    watch_.stop();
    exchange_ = nullptr;
  }
  void armClientWatch() override { watch_.arm(); }
  bool clientGone() const override { return client_gone_ || watch_.gone(); }
  asio::awaitable<bool> sleepFor(Millis wait) override;
  void recordUpstreamFailure(RequestContext& ctx, Error&& err);
  asio::awaitable<void> writeError(RequestContext& ctx, bool filtered = false);
  asio::awaitable<void> replyBadInput(const Error& err);

  // session_relay.cpp: answering from upstream, heads and writes.
  asio::awaitable<void> relay(RequestContext& ctx, UpstreamExchange& exchange, ResponseTranslator& translator,
                              ResponseHead& head, std::optional<Error>& failure) override;
  void heartbeatTick(Clock::time_point now) override;
  void endStreamWithError(RequestContext& ctx, ResponseTranslator& translator);
  void streamWriteFailed() override;
  void acceptHead(RequestContext& ctx, ResponseTranslator& translator, ResponseHead& head);
  asio::awaitable<void> relayBody(RequestContext& ctx, UpstreamExchange& exchange, ResponseTranslator& translator,
                                  ResponseHead& head);
  asio::awaitable<void> holdAnswerEnd(RequestContext& ctx);
  bool sendStreamPiece(RequestContext& ctx, std::string_view out, bool done);
  std::optional<Error> takePiece(UpstreamExchange& exchange, std::string& body, std::string_view bytes, bool done);
  asio::awaitable<std::optional<Error>> readAnswer(RequestContext& ctx, UpstreamExchange& exchange,
                                                   ResponseTranslator& translator, ResponseHead& head,
                                                   std::string& body) override;
  asio::awaitable<void> relayAnswer(RequestContext& ctx, ResponseHead& head, std::string& body) override;
  void headForBody(RequestContext& ctx, ResponseHead& head, std::string& body);
  void deploymentHeaders(HeadWriter& h, const RequestContext& ctx);
  HeadWriter beginHead(int status);
  asio::awaitable<bool> writeHeadAnd(std::string_view body);

  // Headers some answers carry, passed with the answer.
  struct ExtraHeaders {
    std::string_view allow;        // Allow of a 405
    std::string_view retry_after;  // Retry-After of a 429 / 503
    std::string_view fallback;     // X-Tahua-Fallback of a configured fallback answer
    std::span<const std::pair<std::string_view, std::string_view>> added;  // by filters
  };

  using HeaderList = std::vector<std::pair<std::string_view, std::string_view>>;

  void filterHeaders(RequestContext& ctx, HeaderList& added, ExtraHeaders& extra);
  asio::awaitable<void> writeSimple(int status, std::string_view content_type, std::string_view body,
                                    ExtraHeaders extra = {});

  // session_relay.cpp: the WebSocket upgrade.
  static std::optional<Error> realtimeBody(const http::request<RequestBody>& req, RequestContext& ctx);
  asio::awaitable<void> relayRealtime(RequestContext& ctx, const ProviderRuntime& provider) override;
  // RealtimeHost.
  asio::awaitable<void> refuse(RequestContext& ctx) override;
  void onCloseRequest(std::function<void(std::string_view)> close) override {
    realtime_close_ = std::move(close);
    // A drain that began while the session was being set up (its client may already have
    // had the upgrade) found no one to tell: it is told now, not cut at drain_timeout.
    if (realtime_close_ && worker_.draining()) realtime_close_(kDrainCloseReason);
  }
  static constexpr std::string_view kDrainCloseReason = "The gateway is shutting down.";
  FilterChain& chain() override { return *chain_; }
  std::string_view requestId() const override { return request_id_; }

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
  ClientWatch watch_;
  UpstreamExchange* exchange_ = nullptr;
  StreamWriter<Stream> writer_;  // a relayed stream's client side
  std::string filter_ended_;  // a stream a filter ended: its last piece and the error event
  // Per-request filter State (FilterChain::begin), reused across requests.
  std::unique_ptr<std::max_align_t[]> state_block_;
  std::size_t state_block_size_ = 0;
  // Resumer (see finishPausedPhase).
  std::optional<FilterStatus> resumed_;
  std::optional<asio::steady_timer> resume_event_;
  // The API request's context (serve), made anew for each request in storage the
  // connection keeps: in serve()'s coroutine frame its 1,016 bytes took the frame past
  // Asio's frame recycling (1,020 bytes) and glibc's tcache (1,032), so every request
  // paid a malloc and a free outside both. Last: destroyed before the state block.
  // Default-initialised as a local was (std::optional's emplace() would value-initialise:
  // zero all 1,016 bytes before the members' own initialisers run).
  struct ApiContext {
    RequestContext ctx;
    ApiContext() {}  // user-provided: no zeroing first
  };
  std::optional<ApiContext> api_context_;
};

}  // namespace tahua
