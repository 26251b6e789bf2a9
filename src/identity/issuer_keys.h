// The keys of one identity provider, shared by every worker of the process: the set
// last fetched from its JWKS, and who is fetching. Workers read the set under a short
// lock (only when a token is seen for the first time: verified tokens are cached per
// worker) and compare a generation number (an atomic) to know whether keys changed.
// A fetch is done by one worker at a time, through its outbound client (the jwt link);
// the others that need its result register a callback. A failed fetch keeps the set
// as it was: tokens signed by a cached key keep working while the provider is down.
// No Asio here.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "identity/jwt_verifier.h"

namespace tahua::jwt {

class IssuerKeys {
 public:
  std::shared_ptr<const KeySet> keys() const;
  // Changes whenever the set does (a key added or removed).
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  bool loaded() const { return loaded_.load(std::memory_order_acquire); }

  // Whether the caller is to fetch now: none is in flight and the last attempt began at
  // least `min_gap_ms` ago (0: never attempted counts as long ago). Marks one in flight.
  bool beginFetch(std::int64_t now_ms, std::int64_t min_gap_ms);
  // The end of the fetch in flight: a JWKS document, or an error (the set stays). Runs
  // (and forgets) the callbacks registered meanwhile. What went wrong, or empty.
  std::string endFetch(const std::string* jwks, const std::string& error);
  // `fn` runs once, when the fetch in flight ends (on the fetching worker's thread: post
  // from there to your own). False, and never run, when none is in flight.
  bool whenFetched(std::function<void()> fn);
  bool fetching() const;
  // When the last fetch began (steady ms; 0: never): a request may start the periodic
  // refresh when it is due, without taking the lock.
  std::int64_t lastAttemptMs() const { return last_attempt_atomic_.load(std::memory_order_relaxed); }

  // The JWKS address learnt from the discovery document (empty until then).
  std::string jwksUri() const;
  void setJwksUri(std::string uri);

  // For tests and benchmarks: a set given directly.
  void install(std::shared_ptr<const KeySet> keys);

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const KeySet> keys_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> loaded_{false};
  bool in_flight_ = false;
  std::int64_t last_attempt_ms_ = 0;
  std::atomic<std::int64_t> last_attempt_atomic_{0};
  bool attempted_ = false;
  std::vector<std::function<void()>> waiters_;
  std::string jwks_uri_;
};

// The process's IssuerKeys for an identity (the issuer and where its keys are): the same
// object across config reloads, so a reload neither refetches nor forgets keys.
std::shared_ptr<IssuerKeys> issuerKeys(const std::string& identity);

}  // namespace tahua::jwt
