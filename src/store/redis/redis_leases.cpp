// The Redis store's leases: capacity a worker took from a shared counter beyond a
// request's cost, admitting the next requests without a round trip; renewed ahead of
// their end, returned when idle, and waited for by a burst that finds none
// (redis_detail.h has the structures, docs/tenants-and-limits.md the guarantees).
#include "store/redis/redis_store.h"

#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "store/redis/redis_admission.h"
#include "store/redis/redis_client.h"
#include "store/redis/redis_detail.h"

namespace tahua {
using namespace redis_detail;

bool RedisStore::admitFromLeases(std::span<const LimitCheck> checks, const std::function<void(const Admission&)>& done) {
  Leases* leases = workerLeases().get();
  if (!leases || leases->map.empty() || checks.empty()) return false;
  const auto now = std::chrono::steady_clock::now();
  std::array<Lease*, Admission::kMaxChecks> found;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    Lease* found_lease = leases->find(checks[i].key);
    if (!found_lease) return false;
    Lease& l = *found_lease;
    if (l.left < checks[i].cost || now >= l.expires || !sameSpec(l.spec, checks[i].spec)) return false;
    found[i] = &l;
  }
  Admission a;
  a.count = checks.size();
  a.at_ms = found[0]->granted_ms + msSince(found[0]->granted_at, now);  // the server's clock, near enough
  std::array<std::uint8_t, Admission::kMaxChecks> renew;  // indexes (48 LimitChecks made each time cost ~0.5k)
  std::size_t renewing = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    Lease& l = *found[i];
    l.left -= checks[i].cost;
    LimitDecision& d = a.decisions[i];
    d.remaining = l.remaining + l.left;
    d.reset_ms = std::max<std::int64_t>(0, l.reset_ms - msSince(l.granted_at, now));
    // In use and near its end, or down to a quarter: renewed now, while it still admits.
    // (A lease that ends with its window cannot be extended: the next window's comes
    // with the first request in it.)
    if (!l.renewing && ((l.extendable && l.expires - now <= kRenewAhead) || l.left * 4 < l.granted))
      renew[renewing++] = static_cast<std::uint8_t>(i);
  }
  ++leased_;
  if (renewing > 0) {
    std::vector<LimitCheck> due;
    due.reserve(renewing);
    for (std::size_t k = 0; k < renewing; ++k) due.push_back(LimitCheck{checks[renew[k]].key, checks[renew[k]].spec, 0});
    renewLeases(due);
  }
  done(a);
  return true;
}

void RedisStore::renewLeases(std::span<const LimitCheck> checks) {
  Leases* leases = workerLeases().get();
  RedisClient* conn = workerClient().get();
  if (!leases || leases->closed || !conn || !conn->usable()) return;
  // The counter names are copied: nothing pins the filter chain they belong to until
  // the answer comes.
  struct Renewal {
    std::array<std::string, Admission::kMaxChecks> keys;
    std::array<LimitCheck, Admission::kMaxChecks> checks;
    std::array<std::int64_t, Admission::kMaxChecks> want{};
    std::size_t n = 0;
    std::string marker;
    std::span<const LimitCheck> span() const { return {checks.data(), n}; }
  };
  // In a cluster one call reaches one slot: one call per counter there.
  const std::size_t per_call = conn->cluster() ? 1 : checks.size();
  for (std::size_t from = 0; from < checks.size(); from += per_call) {
    auto r = std::make_shared<Renewal>();
    for (const LimitCheck& c : checks.subspan(from, std::min(per_call, checks.size() - from))) {
      const std::int64_t want = leaseWant(c);
      if (want <= 0) continue;
      r->keys[r->n] = std::string(c.key);
      r->checks[r->n] = LimitCheck{r->keys[r->n], c.spec, 0};
      r->want[r->n] = want;
      ++r->n;
    }
    if (r->n == 0) continue;
    r->marker = adjustmentMarker(r->keys[0], "adm");
    ArgScratch& a = admissionCall(admit_sha_, r->span(), true, r->want.data(), r->marker);
    leaseAsked(r->span(), r->want.data(), true);
    ++renewals_;
    ++leases->renewals_in_flight;
    conn->send(a.finish(), [this, r, conn, leases](std::optional<RedisReply> reply) {
      Admission adm;
      std::array<std::int64_t, Admission::kMaxChecks> charged{};
      if (unusableServer(reply)) conn->close();
      if (!reply || !parseAdmission(*reply, r->n, adm, charged.data())) {
        // The leases run out as they would have, and the next request asks Redis itself
        // (or decides locally if Redis is gone). A grant Redis made but whose answer was
        // lost is undone: no worker holds it, so it would count as use.
        leaseAsked(r->span(), r->want.data(), false);
        if (mayHaveApplied(reply)) undoAdmission(r->span(), std::move(r->marker));
      } else {
        recordGrants(r->span(), charged.data(), adm);
      }
      admitWaiting();
      if (--leases->renewals_in_flight == 0 && leases->after_renewals) std::exchange(leases->after_renewals, nullptr)();
    });
  }
}

std::int64_t RedisStore::leaseWant(const LimitCheck& check) {
  Leases* leases = workerLeases().get();
  if (!leases) return 0;
  const auto parts = kLeaseParts * static_cast<std::int64_t>(std::max<std::uint64_t>(1, replicas_.load()) *
                                                             std::max<std::uint64_t>(1, workers_.load()));
  const std::int64_t share = check.spec.limit / parts;
  if (share < kMinLease || share < 2 * check.cost) return 0;
  auto it = leases->map.find(check.key);
  if (it != leases->map.end() && it->second.renewing) return 0;
  return share;
}

void RedisStore::leaseAsked(std::span<const LimitCheck> checks, const std::int64_t* want, bool answered) {
  Leases* leases = workerLeases().get();
  if (!leases) return;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    if (want[i] <= 0) continue;
    if (!answered) {
      if (auto it = leases->map.find(checks[i].key); it != leases->map.end()) it->second.renewing = false;
      continue;
    }
    auto it = leases->map.find(checks[i].key);
    if (it == leases->map.end()) it = leases->map.emplace(std::string(checks[i].key), Lease{}).first;
    it->second.renewing = true;
  }
}

void RedisStore::returnLease(std::string_view key, Lease& lease) {
  if (lease.left > 0) queueAdjustment(LimitCheck{key, lease.spec, 0}, lease.granted_ms, -lease.left);
  lease.left = 0;
}

void RedisStore::recordGrants(std::span<const LimitCheck> checks, const std::int64_t* charged, Admission& a) {
  Leases* leases = workerLeases().get();
  if (!leases) return;
  const auto now = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < checks.size(); ++i) {
    auto it = leases->map.find(checks[i].key);
    if (it != leases->map.end()) it->second.renewing = false;
    const std::int64_t extra = charged[i] - checks[i].cost;
    if (extra <= 0 || !a.allowed) {
      // Nothing more to lease (the limit is nearly used up): no renewal ahead of time
      // until the next grant; requests ask Redis themselves once this lease is spent.
      if (it != leases->map.end()) it->second.granted = 0, it->second.extendable = false;
      continue;
    }
    if (it == leases->map.end()) it = leases->map.emplace(std::string(checks[i].key), Lease{}).first;
    Lease& l = it->second;
    if (now >= l.expires || !sameSpec(l.spec, checks[i].spec)) returnLease(it->first, l);
    const LimitSpec& spec = checks[i].spec;
    LimitDecision& d = a.decisions[i];
    l.spec = spec;
    l.left += extra;
    l.granted = extra;
    l.granted_ms = a.at_ms;
    l.granted_at = now;
    l.remaining = d.remaining;
    l.reset_ms = d.reset_ms;
    // A window's lease ends with the window it was charged in (so every request it admits
    // counts in its own window); a quota's with its period.
    Millis for_ms = kLeaseFor;
    if (spec.kind == LimitKind::Window && spec.period_ms > 0) for_ms = std::min(for_ms, Millis(spec.period_ms - a.at_ms % spec.period_ms));
    if (spec.kind == LimitKind::Quota) for_ms = std::min(for_ms, Millis(d.reset_ms));
    l.expires = now + for_ms;
    l.extendable = for_ms == kLeaseFor;
    d.remaining += l.left;  // what this worker holds is still there for the caller
  }
  if (!leases->armed && !leases->map.empty()) {
    leases->armed = true;
    leases->sweep->expires_after(kLeaseFor);
    leases->sweep->async_wait([this](auto ec) {
      if (!ec) sweepLeases();
    });
  }
}

// Every second: what expired leases still hold goes back to Redis, and they are
// forgotten, so idle capacity is not kept from the other replicas for long.
void RedisStore::sweepLeases() {
  Leases& leases = *workerLeases();
  leases.armed = false;
  const auto now = std::chrono::steady_clock::now();
  for (auto it = leases.map.begin(); it != leases.map.end();) {
    if (now >= it->second.expires && !it->second.renewing) {
      returnLease(it->first, it->second);
      leases.forgetRecent();
      it = leases.map.erase(it);
    } else {
      ++it;
    }
  }
  if (leases.map.empty()) return;
  leases.armed = true;
  leases.sweep->expires_after(kLeaseFor);
  leases.sweep->async_wait([this](auto ec) {
    if (!ec) sweepLeases();
  });
}

bool RedisStore::grantComing(std::span<const LimitCheck> checks) {
  Leases* leases = workerLeases().get();
  if (!leases || leases->closed || leases->waiting.size() >= kMaxWaiting) return false;
  const auto now = std::chrono::steady_clock::now();
  bool coming = false;
  for (const LimitCheck& c : checks) {
    const Lease* l = leases->find(c.key);
    if (!l) return false;
    if (l->renewing) {
      coming = true;
    } else if (l->left < c.cost || now >= l->expires || !sameSpec(l->spec, c.spec)) {
      return false;
    }
  }
  return coming;
}

void RedisStore::admitWaiting() {
  Leases* leases = workerLeases().get();
  if (!leases || leases->waiting.empty()) return;
  auto waiting = std::move(leases->waiting);
  leases->waiting.clear();
  for (auto& w : waiting) {
    ++waited_;
    decide(w.checks, true, std::move(w.done), false);
  }
}

}  // namespace tahua
