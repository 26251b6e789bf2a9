#include "server/attempt_loop.h"

#include <algorithm>
#include <charconv>
#include <random>

#include "core/log.h"
#include "providers/translation.h"
#include "telemetry/metrics.h"

namespace tahua {
namespace {

using Clock = std::chrono::steady_clock;

// Note for GCC 12: never pass a temporary with a destructor (an Error{...}, a
// std::string made from a literal) as an argument inside a co_await expression; GCC 12
// can destroy it twice. Build a named local and pass that.

// Errors that say the upstream (not the request) is the problem: worth another model.
bool failoverError(const Error& e) {
  switch (e.kind) {
    case ErrorKind::UpstreamConnect:
    case ErrorKind::UpstreamTls:
    case ErrorKind::UpstreamTimeout:
    case ErrorKind::UpstreamBadResponse:
    case ErrorKind::CircuitOpen:
    case ErrorKind::ProviderUnavailable: return true;
    default: return false;
  }
}

bool failoverStatus(const RequestContext& ctx, int status) {
  const auto& on = ctx.requested_model->fallback_on;
  return std::find(on.begin(), on.end(), status) != on.end();
}

bool mayTryAgain(const RequestContext& ctx, const Snapshot& snapshot) {
  const ModelConfig& m = *ctx.model;
  if (m.deployments.size() > 1 || !m.fallback_indices.empty() || m.fallback_response) return true;
  return ctx.deployment && snapshot.providers[ctx.deployment->provider_index].config->retry.attempts > 1;
}

// How long to wait before another try, or nothing if this outcome is final: a
// connection that never reached the upstream, or a status in `on_status` whose
// Retry-After (if any) is within max_backoff. Exponential backoff, full jitter.
std::optional<Millis> retryDelay(const RetryPolicy& retry, int attempt, const std::optional<Error>& failure,
                                 const ResponseHead& head) {
  Millis floor{0};
  if (failure) {
    if (!failure->retryable()) return std::nullopt;
  } else {
    if (std::find(retry.on_status.begin(), retry.on_status.end(), head.status) == retry.on_status.end())
      return std::nullopt;
    for (const auto& [name, value] : head.headers) {
      if (name.size() != 11 || !std::equal(name.begin(), name.end(), "retry-after", [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == b;
          }))
        continue;
      unsigned seconds = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
      if (ec != std::errc{} || end != value.data() + value.size()) return std::nullopt;  // a date: not worth waiting
      floor = Millis(std::int64_t{seconds} * 1000);
      if (floor > retry.max_backoff) return std::nullopt;  // the upstream asks for longer than we wait
    }
  }
  const Millis cap = std::min(retry.max_backoff, retry.backoff * (1 << std::min(attempt - 1, 16)));
  thread_local std::minstd_rand rng{std::random_device{}()};
  const Millis jittered{cap.count() > 0 ? static_cast<std::int64_t>(rng() % (cap.count() + 1)) : 0};
  return std::max(floor, jittered);
}

class AttemptLoop {
 public:
  AttemptLoop(RequestContext& ctx, AttemptEnv env, AttemptHost& host) : ctx_(ctx), env_(env), host_(host) {}

  boost::asio::awaitable<void> run() {
    // The request phases; a coroutine only when a filter paused one.
    FilterStatus phases;
    if (host_.bodyPending()) {
      phases = co_await uploadPhases();
      if (host_.clientGone()) {  // it left in the middle of its upload: nothing to answer
        ctx_.status = 499;
        co_return;
      }
    } else {
      RequestPhase phase = RequestPhase::Headers;
      std::size_t next = 0;
      phases = runRequestPhases(phase, next);
      if (phases == FilterStatus::Pause) phases = co_await finishRequestPhases(phase, next);
    }
    if (phases == FilterStatus::Stop) {
      co_await host_.answerLocally(ctx_);
      co_return;
    }
    std::size_t next_filter = 0;
    FilterStatus selected = env_.chain.run(RequestPhase::UpstreamSelect, ctx_, next_filter);
    if (selected == FilterStatus::Pause)
      selected = co_await host_.finishPausedPhase(RequestPhase::UpstreamSelect, ctx_, next_filter);
    // A self-healing shift already moved it to the first fallback (the router set the
    // requested model): failover goes on from the second.
    const bool shifted = ctx_.requested_model != nullptr;
    if (!shifted) ctx_.requested_model = ctx_.model;
    // The client's bytes, kept while another attempt may need them (adapters consume and
    // rewrite ctx.body). Only then: the common request pays no copy.
    if (ctx_.model && !ctx_.local_reply && mayTryAgain(ctx_, env_.snapshot)) original_ = ctx_.body;
    next_fallback_ = shifted ? 1 : 0;
    int model_attempt = 0;  // attempts on the current model: the retry budget
    for (;;) {
      if (selected == FilterStatus::Stop) {
        // Refused before an upstream call (every breaker open, a provider without key).
        if (ctx_.error && !ctx_.local_reply && failoverError(*ctx_.error) && nextFallback()) {
          selected = co_await reselect();
          model_attempt = 0;
          continue;
        }
        if (ctx_.error && !ctx_.local_reply && failoverError(*ctx_.error) && co_await answerFallback()) break;
        co_await host_.answerLocally(ctx_);
        break;
      }
      const ProviderRuntime& provider = env_.snapshot.providers[ctx_.deployment->provider_index];
      if (ctx_.endpoint == Endpoint::Realtime) {  // a WebSocket session: no HTTP exchange, no retry
        ++ctx_.attempts;
        co_await host_.relayRealtime(ctx_, provider);
        break;
      }
      if (ctx_.attempts > 0) ctx_.body = original_;
      auto encoded = provider.adapter->encodeRequest(ctx_, provider);
      if (auto* err = std::get_if<Error>(&encoded)) {
        ctx_.fail(std::move(*err));
        co_await host_.answerLocally(ctx_);
        break;
      }
      UpstreamRequest& request = std::get<UpstreamRequest>(encoded);
      UpstreamRequestHeaders extra(request.header_lines);
      env_.chain.upstreamRequest(ctx_, extra);
      auto translator = provider.adapter->responseTranslator(ctx_, request, provider);
      const RetryPolicy& retry = provider.config->retry;
      ++model_attempt;
      ++ctx_.attempts;
      std::unique_ptr<UpstreamExchange> exchange =
          provider.adapter->openExchange(std::move(request), ctx_, provider, env_.upstream);
      host_.watchClient(exchange.get());
      ResponseHead head;
      std::optional<Error> failure = co_await exchange->start(head);
      if (!host_.clientGone()) {
        // 1. A retry, on another deployment of the model when there is one.
        std::optional<Millis> wait;
        if (model_attempt < retry.attempts) wait = retryDelay(retry, model_attempt, failure, head);
        if (wait) {
          discardAttempt(*exchange, failure, head);
          ++env_.metrics.upstream_retries[provider.config->name];
          if (!co_await host_.sleepFor(*wait) || host_.clientGone()) break;
          selected = co_await reselect();
          continue;
        }
        const bool failed_over = failure ? failoverError(*failure) : failoverStatus(ctx_, head.status);
        // 2. The next fallback model.
        if (failed_over && next_fallback_ < ctx_.requested_model->fallback_indices.size()) {
          discardAttempt(*exchange, failure, head);
          nextFallback();
          selected = co_await reselect();
          model_attempt = 0;
          continue;
        }
        // 3. Everything failed: an answer a filter kept (the cache's), else the configured
        // fallback answer, if any.
        if (failed_over && inboundFor(ctx_.endpoint) &&
            (env_.chain.upstreamsFailed(ctx_) || ctx_.requested_model->fallback_response)) {
          discardAttempt(*exchange, failure, head);
          if (co_await answerFallback()) break;
        }
      }
      // 4. A non-streamed answer a filter judges whole before any of it is sent (the
      // guardrails' quality check): refused, the next fallback model answers instead, once.
      if (!failure && !host_.clientGone() && !head.event_stream && head.status >= 200 && head.status < 300 &&
          env_.chain.judgesAnswer(ctx_)) {
        if (!co_await judgeAnswer(*exchange, *translator, head)) break;
        selected = co_await reselect();
        model_attempt = 0;
        continue;
      }
      // The point of no return (a client already gone gets nothing written).
      co_await host_.relay(ctx_, *exchange, *translator, head, failure);
      break;
    }
    host_.stopWatching();
    if (host_.clientGone()) ctx_.status = 499;  // client closed the request (nginx's convention)
  }

 private:
  // An upload's request phases: the headers' first, then its body is read (only if they
  // let it through), then the body's. A coroutine of its own: run()'s frame, allocated
  // for every request, does not carry its locals.
  boost::asio::awaitable<FilterStatus> uploadPhases() {
    std::size_t next = 0;
    FilterStatus status = env_.chain.run(RequestPhase::Headers, ctx_, next);
    if (status == FilterStatus::Pause) status = co_await host_.finishPausedPhase(RequestPhase::Headers, ctx_, next);
    if (status != FilterStatus::Continue) co_return status;
    if (std::optional<Error> bad = co_await host_.receiveBody(ctx_)) {
      ctx_.fail(std::move(*bad));
      co_return FilterStatus::Stop;
    }
    next = 0;
    status = env_.chain.run(RequestPhase::Body, ctx_, next);
    if (status == FilterStatus::Pause) status = co_await host_.finishPausedPhase(RequestPhase::Body, ctx_, next);
    co_return status;
  }

  // The request phases before selection, from `phase` on: Continue, Stop, or Pause
  // (`phase` and `next` then say where to go on).
  FilterStatus runRequestPhases(RequestPhase& phase, std::size_t& next) {
    for (;;) {
      const FilterStatus status = env_.chain.run(phase, ctx_, next);
      if (status != FilterStatus::Continue) return status;
      if (phase == RequestPhase::Body) return FilterStatus::Continue;
      phase = RequestPhase::Body;
      next = 0;
    }
  }

  // A request phase a filter paused: waits for it, then runs the rest (Continue or Stop).
  boost::asio::awaitable<FilterStatus> finishRequestPhases(RequestPhase phase, std::size_t next) {
    FilterStatus status = co_await host_.finishPausedPhase(phase, ctx_, next);
    while (status == FilterStatus::Continue && phase == RequestPhase::Headers) {
      phase = RequestPhase::Body;
      next = 0;
      status = runRequestPhases(phase, next);
      if (status == FilterStatus::Pause) status = co_await host_.finishPausedPhase(phase, ctx_, next);
    }
    co_return status;
  }

  // Reads the answer whole, lets the filters judge it, and sends it, or the refusal when
  // no fallback model is left to ask; false once answered. True: refused, and the next
  // fallback model was taken (the caller selects its deployment). A coroutine of its own
  // so that run()'s frame, allocated for every request, does not carry its locals.
  boost::asio::awaitable<bool> judgeAnswer(UpstreamExchange& exchange, ResponseTranslator& translator, ResponseHead& head) {
    std::string answer;
    std::optional<Error> unread = co_await host_.readAnswer(ctx_, exchange, translator, head, answer);
    if (unread) {
      co_await host_.relay(ctx_, exchange, translator, head, unread);
      co_return false;
    }
    FilterStatus judged = FilterStatus::Continue;
    if (!ctx_.error && ctx_.status >= 200 && ctx_.status < 300) {
      ctx_.answer = &answer;
      std::size_t next = 0;
      judged = env_.chain.run(RequestPhase::Answer, ctx_, next);
      if (judged == FilterStatus::Pause) judged = co_await host_.finishPausedPhase(RequestPhase::Answer, ctx_, next);
      ctx_.answer = nullptr;
    }
    if (judged != FilterStatus::Stop) {
      co_await host_.relayAnswer(ctx_, head, answer);
      co_return false;
    }
    if (host_.clientGone()) co_return false;
    if (!answer_refused_ && next_fallback_ < ctx_.requested_model->fallback_indices.size()) {
      // The refused answer's call is over (its tokens spent: ctx.usage says how many).
      answer_refused_ = true;
      host_.watchClient(nullptr);
      env_.chain.attemptFailed(ctx_);
      nextFallback();
      co_return true;
    }
    co_await host_.answerLocally(ctx_);
    co_return false;
  }

  // Chooses again after a failed attempt (filters may pause here too).
  boost::asio::awaitable<FilterStatus> reselect() {
    std::size_t next = 0;
    FilterStatus status = env_.chain.run(RequestPhase::Reselect, ctx_, next);
    if (status == FilterStatus::Pause) status = co_await host_.finishPausedPhase(RequestPhase::Reselect, ctx_, next);
    co_return status;
  }

  // Ends an attempt whose answer will not be used: the connection is dropped (its body
  // is unread) and the filters account for it as a failed call of its deployment.
  void discardAttempt(UpstreamExchange& exchange, const std::optional<Error>& failure, const ResponseHead& head) {
    exchange.abort();
    host_.watchClient(nullptr);
    if (failure) ctx_.error = *failure;
    else ctx_.status = head.status;
    env_.chain.attemptFailed(ctx_);
  }

  bool nextFallback() {
    const auto& chain = ctx_.requested_model->fallback_indices;
    if (next_fallback_ >= chain.size()) return false;
    ctx_.model = &ctx_.config->models[chain[next_fallback_++]];
    ctx_.fallback = "model";
    ctx_.body = original_;
    log::info("falling back to another model", {{"request_id", ctx_.request_id}, {"from", ctx_.requested_model->name},
                                                 {"to", ctx_.model->name}});
    return true;
  }

  // Every upstream failed: answer with the requested model's configured fallback, in
  // the client's API shape and clearly marked (X-Tahua-Fallback, "is_fallback": true).
  // A non-2xx status goes out as a JSON body (SDKs read errors as JSON), a 2xx stream
  // request gets a well-formed stream. False if nothing is configured for this API.
  boost::asio::awaitable<bool> answerFallback() {
    // An answer a filter kept (the response cache's, for this request) comes first.
    if ((ctx_.local_reply || env_.chain.upstreamsFailed(ctx_)) && ctx_.local_reply) {
      const std::string reason = ctx_.error ? std::string(ctx_.error->code()) : "upstream_status_" + std::to_string(ctx_.status);
      LocalReply& kept = *ctx_.local_reply;
      if (!kept.body.empty() && kept.body.front() == '{') kept.body.insert(1, "\"is_fallback\":true,");
      ctx_.fallback = "cache";
      ctx_.status = kept.status;
      ctx_.streaming = false;
      ctx_.first_byte = Clock::now();
      ctx_.bytes_out = kept.body.size();
      co_await host_.answerFallback(ctx_, kept.status, kept.content_type, kept.body, reason);
      co_return true;
    }
    const ModelConfig* m = ctx_.requested_model;
    const InboundCodec* inbound = inboundFor(ctx_.endpoint);
    if (!m || !m->fallback_response || !inbound) co_return false;
    ChatResult r;
    r.id = "fallback-" + ctx_.request_id;
    r.content = m->fallback_message;
    r.finish_reason = "stop";
    r.usage.prompt_tokens = 0;
    r.usage.completion_tokens = 0;
    InboundOptions opts;
    opts.model = ctx_.facts.model;
    opts.include_usage = ctx_.facts.include_usage;
    const int status = m->fallback_status;
    std::string body;
    std::string_view content_type = "application/json";
    if (ctx_.facts.stream && status < 300) {
      auto encoder = inbound->streamEncoder(opts);
      ChatChunk chunk;
      chunk.start = true;
      chunk.content = m->fallback_message;
      chunk.finish_reason = "stop";
      encoder->onChunk(chunk, body);
      encoder->finish(body);
      content_type = "text/event-stream; charset=utf-8";
    } else {
      body = inbound->encodeResult(r, opts);
      if (!body.empty() && body.front() == '{') body.insert(1, "\"is_fallback\":true,");
    }
    // Why: the last failure's code, or the last upstream status.
    const std::string reason = ctx_.error ? std::string(ctx_.error->code()) : "upstream_status_" + std::to_string(ctx_.status);
    ctx_.fallback = "response";
    ctx_.status = status;
    ctx_.streaming = false;
    ctx_.first_byte = Clock::now();
    ctx_.bytes_out = body.size();
    co_await host_.answerFallback(ctx_, status, content_type, body, reason);
    co_return true;
  }

  RequestContext& ctx_;
  AttemptEnv env_;
  AttemptHost& host_;
  std::string original_;
  std::size_t next_fallback_ = 0;
  bool answer_refused_ = false;  // a judged answer was refused once already
};

}  // namespace

boost::asio::awaitable<void> runAttempts(RequestContext& ctx, AttemptEnv env, AttemptHost& host) {
  AttemptLoop loop(ctx, env, host);
  co_await loop.run();
  ctx.end = Clock::now();
  env.chain.complete(ctx);
}

}  // namespace tahua
