#include "providers/cloud_token.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <optional>

#include "core/duration.h"

namespace tahua {
namespace {

namespace asio = boost::asio;

std::string seconds(Millis d) {
  const auto ms = d.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + "s" : std::to_string(ms) + "ms";
}

// No usable token: why, for the client (never the token).
Error noToken(const cloud_auth::TokenSlot& slot, const cloud_auth::TokenState& state, const ProviderConfig& p, bool waited) {
  std::string message = "The " + p.type + " provider '" + p.name + "' has no access token";
  if (!state.token.empty()) {
    message += ": the token of " + slot.describe() + " expired and could not be refreshed";
  } else {
    message += " yet";
    if (waited) message += " (waited " + seconds(p.token_wait) + " for " + slot.describe() + ")";
  }
  message += state.error.empty() ? ": its first fetch has not finished." : ": " + state.error;
  return Error{ErrorKind::ProviderUnavailable, std::move(message)};
}

// Wakes the waiting coroutine on its worker's thread; gone with it.
class Wake final : public cloud_auth::TokenWaiter, public std::enable_shared_from_this<Wake> {
 public:
  Wake(asio::any_io_executor executor, asio::steady_timer& timer) : executor_(std::move(executor)), timer_(&timer) {}
  void tokenArrived() override {
    asio::post(executor_, [weak = weak_from_this()] {
      if (auto self = weak.lock()) self->timer_->cancel();
    });
  }

 private:
  asio::any_io_executor executor_;
  asio::steady_timer* timer_;  // the wait's, which owns this
};

// One wait for a usable token: until one arrives, at most the provider's token_wait;
// abort() (from the wait's thread) cuts it short.
class TokenWait {
 public:
  asio::awaitable<std::variant<std::string, Error>> run(cloud_auth::TokenSlot& slot, const ProviderConfig& p) {
    const auto deadline = cloud_auth::SteadyClock::now() + p.token_wait;
    for (;;) {
      const std::shared_ptr<const cloud_auth::TokenState> state = slot.state();
      const auto now = cloud_auth::SteadyClock::now();
      if (state->usable(now)) {
        wake_.reset();
        co_return state->token;
      }
      if (aborted_) co_return Error{ErrorKind::UpstreamInterrupted, "The request ended while waiting for an access token."};
      if (!state->token.empty() || now >= deadline) co_return noToken(slot, *state, p, state->token.empty());
      if (!wake_) {
        timer_.emplace(co_await asio::this_coro::executor);
        wake_ = std::make_shared<Wake>(timer_->get_executor(), *timer_);
      }
      if (!slot.await(wake_)) continue;  // it arrived meanwhile
      timer_->expires_at(deadline);
      co_await timer_->async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }
  void abort() noexcept {
    aborted_ = true;
    if (timer_) timer_->cancel();
  }

 private:
  std::optional<asio::steady_timer> timer_;  // made when it first waits
  std::shared_ptr<Wake> wake_;              // declared after: gone before the timer
  bool aborted_ = false;
};

// The attempt while no token is there: waits, then opens the real exchange.
class TokenWaitExchange final : public UpstreamExchange {
 public:
  TokenWaitExchange(const ProviderAdapter& adapter, cloud_auth::TokenSlot& slot, UpstreamRequest request,
                    RequestContext& ctx, const ProviderRuntime& provider, UpstreamEnv& env)
      : adapter_(adapter), slot_(slot), request_(std::move(request)), ctx_(ctx), provider_(provider), env_(env) {}

  asio::awaitable<std::optional<Error>> start(ResponseHead& head) override {
    auto token = co_await wait_.run(slot_, *provider_.config);
    if (auto* error = std::get_if<Error>(&token)) co_return std::move(*error);
    request_.addHeader("Authorization", "Bearer " + std::get<std::string>(token));
    inner_ = adapter_.ProviderAdapter::openExchange(std::move(request_), ctx_, provider_, env_);
    co_return co_await inner_->start(head);
  }

  asio::awaitable<std::optional<Error>> read(std::string_view& bytes, bool& done) override {
    return inner_->read(bytes, done);
  }
  bool bodyBuffered() const override { return inner_ && inner_->bodyBuffered(); }
  void releaseHead() override {
    if (inner_) inner_->releaseHead();
  }
  void abort() noexcept override {
    wait_.abort();
    if (inner_) inner_->abort();
  }

 private:
  const ProviderAdapter& adapter_;
  cloud_auth::TokenSlot& slot_;
  UpstreamRequest request_;
  RequestContext& ctx_;
  const ProviderRuntime& provider_;
  UpstreamEnv& env_;
  TokenWait wait_;
  std::unique_ptr<UpstreamExchange> inner_;
};

}  // namespace

std::unique_ptr<UpstreamExchange> openWithCloudToken(const ProviderAdapter& adapter, cloud_auth::TokenSlot& slot,
                                                     UpstreamRequest request, RequestContext& ctx,
                                                     const ProviderRuntime& provider, UpstreamEnv& env) {
  // The common case: a token is there; the attempt is the adapter's usual exchange.
  if (const auto state = slot.state(); state->usable(cloud_auth::SteadyClock::now())) {
    request.addHeader("Authorization", "Bearer " + state->token);
    return adapter.ProviderAdapter::openExchange(std::move(request), ctx, provider, env);
  }
  return std::make_unique<TokenWaitExchange>(adapter, slot, std::move(request), ctx, provider, env);
}

std::variant<std::string, Error> currentCloudToken(const cloud_auth::TokenSlot& slot, const ProviderConfig& provider) {
  const auto state = slot.state();
  if (state->usable(cloud_auth::SteadyClock::now())) return state->token;
  return noToken(slot, *state, provider, false);
}

asio::awaitable<std::variant<std::string, Error>> awaitCloudToken(cloud_auth::TokenSlot& slot, const ProviderConfig& provider) {
  TokenWait wait;
  co_return co_await wait.run(slot, provider);
}

}  // namespace tahua
