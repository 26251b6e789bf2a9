#include "identity/issuer_keys.h"

#include <map>

namespace tahua::jwt {

std::shared_ptr<const KeySet> IssuerKeys::keys() const {
  std::lock_guard lock(mu_);
  return keys_;
}

bool IssuerKeys::beginFetch(std::int64_t now_ms, std::int64_t min_gap_ms) {
  std::lock_guard lock(mu_);
  if (in_flight_ || (attempted_ && now_ms - last_attempt_ms_ < min_gap_ms)) return false;
  in_flight_ = true;
  attempted_ = true;
  last_attempt_ms_ = now_ms;
  last_attempt_atomic_.store(now_ms, std::memory_order_relaxed);
  return true;
}

std::string IssuerKeys::endFetch(const std::string* jwks, const std::string& error) {
  std::string why = error;
  std::vector<std::function<void()>> waiters;
  {
    std::lock_guard lock(mu_);
    if (jwks && why.empty()) {
      std::shared_ptr<const KeySet> next = KeySet::parse(*jwks, keys_.get(), why);
      if (next && next->size() == 0) why = "the JWKS holds no RS256, ES256 or EdDSA signing key";
      if (next && why.empty()) {
        // The same keys (the same objects, taken over by parse) need no new generation:
        // the verified tokens stay as they are.
        bool same = keys_ && keys_->size() == next->size();
        for (std::size_t i = 0; same && i < next->size(); ++i) same = keys_->contains(next->keys()[i].get());
        keys_ = std::move(next);
        if (!same) generation_.fetch_add(1, std::memory_order_acq_rel);
        loaded_.store(true, std::memory_order_release);
      }
    }
    in_flight_ = false;
    waiters.swap(waiters_);
  }
  for (auto& w : waiters) w();
  return why;
}

bool IssuerKeys::whenFetched(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  if (!in_flight_) return false;
  waiters_.push_back(std::move(fn));
  return true;
}

bool IssuerKeys::fetching() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

std::string IssuerKeys::jwksUri() const {
  std::lock_guard lock(mu_);
  return jwks_uri_;
}

void IssuerKeys::setJwksUri(std::string uri) {
  std::lock_guard lock(mu_);
  jwks_uri_ = std::move(uri);
}

void IssuerKeys::install(std::shared_ptr<const KeySet> keys) {
  std::lock_guard lock(mu_);
  keys_ = std::move(keys);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  loaded_.store(true, std::memory_order_release);
}

std::shared_ptr<IssuerKeys> issuerKeys(const std::string& identity) {
  // A handful of issuers over a process's life: kept for good (a reload that drops an
  // issuer and brings it back finds its keys).
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<IssuerKeys>, std::less<>> all;
  std::lock_guard lock(mu);
  auto& slot = all[identity];
  if (!slot) slot = std::make_shared<IssuerKeys>();
  return slot;
}

}  // namespace tahua::jwt
