// The access tokens of the process's cloud credentials (Vertex AI's Google credentials;
// Azure Entra ID's), one entry per credential, kept fresh by one refresher thread
// that owns every entry: a token is fetched before its first use and refreshed before it
// expires, never on a worker and never twice at once for one credential. A failed
// refresh keeps the token it had until that expires (retrying with backoff meanwhile).
// Workers read an entry's current token with one atomic load (TokenSlot::state); a
// request that finds none yet registers a waiter, woken when one arrives. No Asio here.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cloud_auth/token_source.h"

namespace tahua::cloud_auth {

using SteadyClock = std::chrono::steady_clock;

// What a worker sees of a credential.
struct TokenState {
  std::string token;  // the bearer token; empty: none yet
  // Used until then: a little before its expiry, so that it does not expire in transit.
  SteadyClock::time_point usable_until{};
  WallClock::time_point expires_at{};
  std::string error;  // why the last fetch failed; empty after a success
  bool usable(SteadyClock::time_point now) const { return !token.empty() && now < usable_until; }
};

// Told (on the refresher thread) that a token arrived; it posts to its own thread.
class TokenWaiter {
 public:
  virtual ~TokenWaiter() = default;
  virtual void tokenArrived() = 0;
};

class TokenCache;

// One credential's entry: its source, its current token, who waits for one.
class TokenSlot {
 public:
  TokenSlot(std::string key, std::unique_ptr<TokenSource> source);
  std::shared_ptr<const TokenState> state() const { return state_.load(std::memory_order_acquire); }
  const std::string& describe() const { return description_; }
  // Registers `waiter` to be told when a usable token arrives; false (and not
  // registered) when one is there already: read state() again. Waiters that are gone
  // are dropped as new ones come.
  bool await(std::weak_ptr<TokenWaiter> waiter);

 private:
  friend class TokenCache;
  // The refresher's: installs a fetch's outcome and wakes the waiters after a success.
  void install(const FetchResult& result, SteadyClock::time_point now);

  const std::string key_;
  const std::unique_ptr<TokenSource> source_;
  const std::string description_;
  std::atomic<std::shared_ptr<const TokenState>> state_;
  std::mutex waiters_mu_;
  std::vector<std::weak_ptr<TokenWaiter>> waiters_;
  // The refresher's schedule (under the cache's lock).
  SteadyClock::time_point due_{};
  std::chrono::milliseconds backoff_{0};
};

class TokenCache {
 public:
  TokenCache() = default;
  ~TokenCache();  // stops the refresher
  TokenCache(const TokenCache&) = delete;
  TokenCache& operator=(const TokenCache&) = delete;

  // The process's cache (started by the gateway; a config check never fetches).
  static TokenCache& process();

  // The entry of credential `key` (the same object while anyone holds it: a config
  // reload keeps its token and fetches nothing); `make` builds its source when new.
  std::shared_ptr<TokenSlot> slot(const std::string& key, const std::function<std::unique_ptr<TokenSource>()>& make);

  // The refresher thread: fetches what is due, entries made before included. Idempotent.
  void start();
  // Ends it; a fetch in flight is cut short. Entries keep their last token.
  void stop();

  // How long before its expiry a token of `lifetime` is refreshed, and the retry delays
  // after a failed fetch (doubling from the first up to the last).
  static std::chrono::milliseconds refreshAhead(std::chrono::milliseconds lifetime);
  static constexpr std::chrono::milliseconds kFirstRetry{1'000};
  static constexpr std::chrono::milliseconds kMaxRetry{30'000};

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::weak_ptr<TokenSlot>, std::less<>> slots_;
  std::thread thread_;
  bool running_ = false;
  bool stopping_ = false;
  std::function<void()> interrupt_;  // cuts the refresher's fetch in flight (set while running)
};

}  // namespace tahua::cloud_auth
