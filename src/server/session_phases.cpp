// Routing and the filter phases: which path a request takes (the API pipeline, the
// gateway's own answers, the admin listener), its RequestContext, the pause and resume
// of a phase, and the answers given here (local replies, errors, the fallback answer).
// Members of Session (session_impl.h).
#include <cctype>
#include <charconv>

#include "core/log.h"
#include "server/session_impl.h"

namespace tahua {

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

bool validRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':')) return false;
  return true;
}

// A change (not GET, HEAD or OPTIONS) asked for by a page of another origin than the
// admin listener's: its Origin is not http(s)://<the Host it was sent to>. Without an
// Origin (curl, an SDK) it is no browser's page: allowed, the token decides.
bool foreignOrigin(std::string_view method, std::string_view origin, std::string_view host) {
  if (method == "GET" || method == "HEAD" || method == "OPTIONS" || origin.empty()) return false;
  for (std::string_view scheme : {"http://", "https://"})
    if (origin.size() == scheme.size() + host.size() && !host.empty() && beast::iequals(origin.substr(0, scheme.size()), scheme) &&
        beast::iequals(origin.substr(scheme.size()), host))
      return false;
  return true;  // another origin, or "null" (a sandboxed frame, a file)
}

}  // namespace

// Note on coroutine frames: a frame holds every local of every branch for the life of
// the call, and a held stream keeps its whole chain of frames. The API path therefore
// has a frame of its own, with one RequestContext; local answers are another call.
template <class Stream>
asio::awaitable<void> Session<Stream>::serve(http::request<RequestBody>& req, Clock::time_point received) {
  std::string_view target = req.target();
  std::string_view path = target.substr(0, target.find('?'));
  RouteMatch match = matchRoute(path);
  // /mcp exists once some provider is an MCP server.
  if (match.endpoint == Endpoint::Mcp && snapshot_->config->mcp.targets.empty()) match = {};
  std::string_view incoming_id = req["x-request-id"];
  if (validRequestId(incoming_id)) request_id_.assign(incoming_id);
  else worker_.nextRequestId(request_id_);
  // HEAD is GET without the body (RFC 9110 9.3.2); every answer to it, errors
  // included and on the admin listener too, has none, or a keep-alive client would
  // read the body as the next answer.
  head_only_ = req.method() == http::verb::head;
  const http::verb method = head_only_ && match.method == http::verb::get ? http::verb::get : req.method();
  if (admin_ || match.route != Route::Api || !match.accepts(method)) {
    co_await serveLocal(req, received, path, match, method);
    co_return;
  }
  RequestContext& ctx = api_context_.emplace().ctx;
  initContext(ctx, req, received, path, match.endpoint);
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
      api_context_.reset();
      co_return;
    }
  }
  watch_.reset();
  AttemptEnv env{*snapshot_, *chain_, worker_.upstreamEnv(), worker_.metrics()};
  co_await runAttempts(ctx, env, *this);
  api_context_.reset();  // an idle connection keeps none of it (the body, the filters' state)
  request_fields_ = nullptr;
  realtime_request_ = nullptr;
  if (clientGone()) keep_alive_ = false;
}

// Everything answered by the gateway itself: the admin listener, health, metrics, 404, 405.
template <class Stream>
asio::awaitable<void> Session<Stream>::serveLocal(http::request<RequestBody>& req, Clock::time_point received,
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
template <class Stream>
asio::awaitable<void> Session<Stream>::serveAdmin(http::request<RequestBody>& req, std::string_view path,
                                             std::string_view target) {
  if (path == "/healthz") {
    co_await writeSimple(200, "application/json", R"({"status":"ok"})");
    co_return;
  }
  std::string_view method = req.method_string();
  AdminReply reply;
  if (foreignOrigin(method, req[http::field::origin], req[http::field::host])) {
    // A browser's page from elsewhere: no change on its behalf, token or not.
    reply = {403, R"({"error":{"message":"A change through the admin API from another origin is refused (Origin is not this listener's).","type":"admin_error","code":"foreign_origin"}})"};
  } else {
    std::string_view auth = req[http::field::authorization];
    std::string_view accept = req[http::field::accept];  // CSV from the ledger's endpoints
    std::string& body = req.body().text;
    reply = co_await worker_.admin(method, target, auth, accept, body);
  }
  log::info("admin request", {{"method", method}, {"path", path}, {"status", reply.status}, {"request_id", request_id_}});
  // Admin answers may hold secrets (a new key's) or a tenant's data: never kept by a
  // cache, never sniffed into another type.
  HeaderList headers{{"Cache-Control", "no-store"}, {"X-Content-Type-Options", "nosniff"}};
  for (const auto& [name, value] : reply.headers) headers.emplace_back(name, value);  // the console's CSP
  ExtraHeaders extra;
  extra.added = headers;
  co_await writeSimple(reply.status, reply.content_type, reply.body, extra);
}

template <class Stream>
RequestContext Session<Stream>::newContext(const http::request<RequestBody>& req, Clock::time_point received,
                                           std::string_view path, Endpoint endpoint) {
  RequestContext ctx;
  initContext(ctx, req, received, path, endpoint);
  return ctx;
}

template <class Stream>
void Session<Stream>::initContext(RequestContext& ctx, const http::request<RequestBody>& req, Clock::time_point received,
                                  std::string_view path, Endpoint endpoint) {
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
}

// A request phase that a filter paused: waits for each resume and goes on from the
// filter after the paused one. Only requests that pause pay for this coroutine.
template <class Stream>
asio::awaitable<FilterStatus> Session<Stream>::finishPausedPhase(RequestPhase phase, RequestContext& ctx,
                                                                std::size_t next) {
  FilterStatus status = FilterStatus::Pause;
  while (status == FilterStatus::Pause) {
    status = co_await awaitResume();
    if (status == FilterStatus::Continue) status = chain_->run(phase, ctx, next);
  }
  co_return status;
}

// The status a paused filter resumes with.
template <class Stream>
asio::awaitable<FilterStatus> Session<Stream>::awaitResume() {
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
template <class Stream>
asio::awaitable<void> Session<Stream>::answerFallback(RequestContext& ctx, int status, std::string_view content_type,
                                                 std::string_view body, std::string_view reason) {
  ExtraHeaders extra;
  extra.fallback = reason;
  HeaderList added;
  filterHeaders(ctx, added, extra);
  co_await writeSimple(status, content_type, body, extra);
}

// A request answered here (404, 405 with its Allow): its local answer, then the
// chain's onComplete.
template <class Stream>
asio::awaitable<void> Session<Stream>::finishLocally(RequestContext& ctx, std::string_view allow) {
  co_await writeLocal(ctx, allow);
  ctx.end = Clock::now();
  chain_->complete(ctx);
}

// AttemptHost: writes the local reply or the error the pipeline recorded.
template <class Stream>
asio::awaitable<void> Session<Stream>::answerLocally(RequestContext& ctx) {
  co_await writeLocal(ctx, {});
}

template <class Stream>
asio::awaitable<void> Session<Stream>::writeLocal(RequestContext& ctx, std::string_view allow) {
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

// Sleeps unless the client leaves (the watcher cannot abort a timer; it is short).
template <class Stream>
asio::awaitable<bool> Session<Stream>::sleepFor(Millis wait) {
  if (wait.count() == 0) co_return true;
  asio::steady_timer timer(lowest().get_executor(), wait);
  auto [ec] = co_await timer.async_wait(kUseTuple);
  co_return !ec;
}

// `filtered`: onResponseHeaders already ran for this request (the upstream's head was
// accepted, then its body failed); it runs once per request.
template <class Stream>
asio::awaitable<void> Session<Stream>::writeError(RequestContext& ctx, bool filtered) {
  ctx.status = ctx.error->httpStatus();
  std::string body = ctx.errorBody(*ctx.error);
  ctx.bytes_out = body.size();
  ctx.first_byte = Clock::now();
  ExtraHeaders extra;
  HeaderList added;
  if (!filtered) filterHeaders(ctx, added, extra);
  co_await writeSimple(ctx.status, "application/json", body, extra);
}

// For requests whose framing cannot be trusted: answer, then close.
template <class Stream>
asio::awaitable<void> Session<Stream>::replyBadInput(const Error& err) {
  keep_alive_ = false;
  head_only_ = false;
  worker_.nextRequestId(request_id_);
  const std::string body = err.toJson();
  co_await writeSimple(err.httpStatus(), "application/json", body);
}

#define TAHUA_SESSION_PHASES(S)                                                                                        \
  template asio::awaitable<void> Session<S>::serve(http::request<RequestBody>&, Clock::time_point);                   \
  template asio::awaitable<void> Session<S>::serveLocal(http::request<RequestBody>&, Clock::time_point,               \
                                                        std::string_view, RouteMatch, http::verb);                    \
  template asio::awaitable<void> Session<S>::serveAdmin(http::request<RequestBody>&, std::string_view, std::string_view); \
  template RequestContext Session<S>::newContext(const http::request<RequestBody>&, Clock::time_point, std::string_view, \
                                                 Endpoint);                                                           \
  template asio::awaitable<FilterStatus> Session<S>::finishPausedPhase(RequestPhase, RequestContext&, std::size_t);   \
  template asio::awaitable<FilterStatus> Session<S>::awaitResume();                                                   \
  template asio::awaitable<void> Session<S>::answerFallback(RequestContext&, int, std::string_view, std::string_view, \
                                                            std::string_view);                                        \
  template asio::awaitable<void> Session<S>::finishLocally(RequestContext&, std::string_view);                        \
  template asio::awaitable<void> Session<S>::answerLocally(RequestContext&);                                          \
  template asio::awaitable<void> Session<S>::writeLocal(RequestContext&, std::string_view);                           \
  template asio::awaitable<bool> Session<S>::sleepFor(Millis);                                                        \
  template asio::awaitable<void> Session<S>::writeError(RequestContext&, bool);                                       \
  template asio::awaitable<void> Session<S>::replyBadInput(const Error&);
TAHUA_SESSION_PHASES(PlainStream)
TAHUA_SESSION_PHASES(TlsStream)
#undef TAHUA_SESSION_PHASES

}  // namespace tahua
