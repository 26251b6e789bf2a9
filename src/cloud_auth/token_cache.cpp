#include "cloud_auth/token_cache.h"

#include <algorithm>

#include "core/log.h"
#include "net/http_client.h"
#include "core/thread_name.h"

namespace tahua::cloud_auth {

namespace {
using std::chrono::milliseconds;

std::int64_t secondsUntil(WallClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t - WallClock::now()).count();
}
}  // namespace

TokenSlot::TokenSlot(std::string key, std::unique_ptr<TokenSource> source)
    : key_(std::move(key)), source_(std::move(source)), description_(source_->describe()),
      state_(std::make_shared<const TokenState>()) {}

bool TokenSlot::await(std::weak_ptr<TokenWaiter> waiter) {
  std::lock_guard lock(waiters_mu_);
  // Checked under the lock install() wakes under: a token cannot slip in unseen.
  if (state()->usable(SteadyClock::now())) return false;
  std::erase_if(waiters_, [](const std::weak_ptr<TokenWaiter>& w) { return w.expired(); });
  waiters_.push_back(std::move(waiter));
  return true;
}

void TokenSlot::install(const FetchResult& result, SteadyClock::time_point now) {
  const auto previous = state();
  auto next = std::make_shared<TokenState>();
  if (const auto* token = std::get_if<AccessToken>(&result)) {
    next->token = token->value;
    next->expires_at = token->expires_at;
    const auto lifetime = std::chrono::duration_cast<milliseconds>(token->expires_at - WallClock::now());
    // A tenth of its life early (at most 30 s): no request leaves with a token that
    // expires before the upstream reads it.
    next->usable_until = now + lifetime - std::min<milliseconds>(lifetime / 10, milliseconds(30'000));
  } else {
    // A failure keeps the token there is (usable until its own end).
    next->token = previous->token;
    next->expires_at = previous->expires_at;
    next->usable_until = previous->usable_until;
    next->error = std::get<std::string>(result);
  }
  std::vector<std::weak_ptr<TokenWaiter>> wake;
  {
    std::lock_guard lock(waiters_mu_);
    state_.store(std::move(next), std::memory_order_release);
    if (std::holds_alternative<AccessToken>(result)) wake.swap(waiters_);
  }
  for (auto& w : wake)
    if (auto live = w.lock()) live->tokenArrived();
}

TokenCache::~TokenCache() { stop(); }

TokenCache& TokenCache::process() {
  static TokenCache cache;
  return cache;
}

milliseconds TokenCache::refreshAhead(milliseconds lifetime) {
  // Half the life of a short-lived token, five minutes before the end of an hour-long one.
  return std::min<milliseconds>(lifetime / 2, milliseconds(5 * 60'000));
}

std::shared_ptr<TokenSlot> TokenCache::slot(const std::string& key,
                                            const std::function<std::unique_ptr<TokenSource>()>& make) {
  std::lock_guard lock(mu_);
  auto& entry = slots_[key];
  if (auto live = entry.lock()) return live;
  auto made = std::make_shared<TokenSlot>(key, make());
  made->due_ = SteadyClock::now();  // fetched as soon as the refresher runs
  entry = made;
  cv_.notify_all();
  return made;
}

void TokenCache::start() {
  std::lock_guard lock(mu_);
  if (running_) return;
  running_ = true;
  stopping_ = false;
  thread_ = std::thread([this] {
    nameThisThread("tahua-tokens");
    run();
  });
}

void TokenCache::stop() {
  std::thread thread;
  {
    std::lock_guard lock(mu_);
    if (!running_) return;
    stopping_ = true;
    if (interrupt_) interrupt_();
    cv_.notify_all();
    thread.swap(thread_);
  }
  thread.join();
  std::lock_guard lock(mu_);
  running_ = false;
}

void TokenCache::run() {
  // Made at the first fetch, not here: most configs have no cloud provider, and its TLS
  // context reads the system's CA bundle (a file open while the gateway says it is ready).
  std::unique_ptr<BlockingHttpClient> http;
  std::unique_lock lock(mu_);
  interrupt_ = [&http] {
    if (http) http->interrupt();
  };
  while (!stopping_) {
    // The entry due first; entries nobody holds any more are forgotten.
    std::shared_ptr<TokenSlot> due;
    for (auto it = slots_.begin(); it != slots_.end();) {
      auto live = it->second.lock();
      if (!live) {
        it = slots_.erase(it);
        continue;
      }
      if (!due || live->due_ < due->due_) due = std::move(live);
      ++it;
    }
    if (!due) {
      cv_.wait(lock);
      continue;
    }
    if (due->due_ > SteadyClock::now()) {
      const auto when = due->due_;
      due.reset();  // not held while waiting: an unused entry may go
      cv_.wait_until(lock, when);
      continue;
    }
    // One fetch at a time, outside the lock (workers making entries are not held up).
    lock.unlock();
    if (!http) {
      auto made = std::make_unique<BlockingHttpClient>();
      lock.lock();
      http = std::move(made);  // under the lock: stop() interrupts through it
      if (stopping_) break;
      lock.unlock();
    }
    FetchResult result = due->source_->fetch(*http);
    const auto now = SteadyClock::now();
    const bool first = due->state()->token.empty();
    due->install(result, now);
    lock.lock();
    if (stopping_) break;
    if (const auto* token = std::get_if<AccessToken>(&result)) {
      const auto lifetime = std::chrono::duration_cast<milliseconds>(token->expires_at - WallClock::now());
      due->due_ = now + std::max<milliseconds>(lifetime - refreshAhead(lifetime), milliseconds(1'000));
      due->backoff_ = milliseconds(0);
      log::info(first ? "cloud token ready" : "cloud token refreshed",
                {{"credential", due->describe()}, {"expires_in_s", secondsUntil(token->expires_at)}});
    } else {
      due->backoff_ = due->backoff_.count() == 0 ? kFirstRetry : std::min(due->backoff_ * 2, kMaxRetry);
      due->due_ = now + due->backoff_;
      const auto kept = due->state();
      boost::json::object fields{{"credential", due->describe()},
                                 {"error", std::get<std::string>(result)},
                                 {"retry_in_ms", due->backoff_.count()}};
      if (kept->usable(now)) fields["keeps_token_for_s"] = secondsUntil(kept->expires_at);
      else fields["token"] = kept->token.empty() ? "none yet" : "expired";
      log::warn("cloud token fetch failed", std::move(fields));
    }
  }
  interrupt_ = nullptr;
}

}  // namespace tahua::cloud_auth
