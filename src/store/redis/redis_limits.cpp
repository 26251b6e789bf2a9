// The Redis store's limit decisions (one script call per request, on the worker's own
// connection), the per-replica fallback, and calibrations summed per worker.
#include "store/redis/redis_store.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <limits>
#include <utility>

#include "core/log.h"
#include "store/redis/redis_client.h"
#include "store/redis/redis_detail.h"
#include "store/redis/redis_scripts.h"

namespace tahua {
namespace asio = boost::asio;
using namespace redis_detail;

namespace {

// The admission script's answer; `charged` gets what each check was charged (its cost
// plus a lease) when the request was allowed.
bool parseAdmission(const RedisReply& r, std::size_t n, Admission& a, std::int64_t* charged) {
  if (r.type != RedisReply::Type::Array || r.elements.size() != 3 + 6 * n) return false;
  for (const auto& e : r.elements)
    if (e.type != RedisReply::Type::Integer) return false;
  a.allowed = r.elements[0].integer == 1;
  a.denied = r.elements[1].integer > 0 ? static_cast<std::size_t>(r.elements[1].integer - 1) : Admission::kMaxChecks;
  a.at_ms = r.elements[2].integer;
  a.count = n;
  for (std::size_t i = 0; i < n; ++i) {
    const auto* e = &r.elements[3 + 6 * i];
    LimitDecision& d = a.decisions[i];
    d.allowed = e[0].integer == 1;
    d.never = e[1].integer == 1;
    d.remaining = e[2].integer;
    d.reset_ms = e[3].integer;
    d.retry_after_ms = e[4].integer;
    charged[i] = e[5].integer;
  }
  return a.allowed || a.denied < n;
}

bool sameSpec(const LimitSpec& a, const LimitSpec& b) {
  return a.kind == b.kind && a.limit == b.limit && a.period_ms == b.period_ms && a.calendar == b.calendar;
}

std::int64_t msSince(std::chrono::steady_clock::time_point then, std::chrono::steady_clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - then).count();
}

// The admission script's call for `checks`: their keys (and `marker`, when not empty),
// then per check its kind, limit, period, calendar, cost and the lease wanted beyond it
// (`want` null: none).
ArgScratch& admissionCall(std::string_view sha, std::span<const LimitCheck> checks, bool charge, const std::int64_t* want,
                          std::string_view marker = {}) {
  ArgScratch& a = argScratch();
  a.begin(24 * (7 * checks.size() + 2));
  a.view("EVALSHA");
  a.view(sha);
  a.number(static_cast<std::int64_t>(checks.size() + (marker.empty() ? 0 : 1)));
  for (const auto& c : checks) a.view(c.key);
  if (!marker.empty()) a.view(marker);
  a.number(!charge ? 0 : marker.empty() ? 1 : 2);
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const LimitCheck& c = checks[i];
    a.number(static_cast<int>(c.spec.kind));
    a.number(c.spec.limit);
    a.number(c.spec.period_ms);
    a.number(static_cast<int>(c.spec.calendar));
    a.number(c.cost);
    a.number(want ? want[i] : 0);
  }
  return a;
}

// Whether an admission's answer, should it be lost, must be undone in Redis: it charges a
// lease (capacity beyond the request: lost, it would count as use no request made) or a
// quota (billing: the local decision charges it again). Only those carry a marker, so a
// plain rate check costs Redis no key.
bool needsMarker(std::span<const LimitCheck> checks, const std::int64_t* want) {
  for (std::size_t i = 0; i < checks.size(); ++i)
    if ((want && want[i] > 0) || (checks[i].spec.kind == LimitKind::Quota && checks[i].cost != 0)) return true;
  return false;
}

// No answer, or one that is not the script's: the call may have been applied.
bool mayHaveApplied(const std::optional<RedisReply>& r) { return !r || !r->isError(); }

}  // namespace

void RedisStore::admit(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) {
  decide(checks, true, std::move(done));
}

void RedisStore::peek(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) {
  decide(checks, false, std::move(done));
}

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

void RedisStore::decide(std::span<const LimitCheck> checks, bool charge, std::function<void(const Admission&)> done, bool may_wait) {
  checks = checks.first(std::min(checks.size(), Admission::kMaxChecks));
  if (charge && admitFromLeases(checks, done)) return;
  RedisClient* conn = workerClient().get();
  if (!conn || !conn->usable()) {
    decideLocally(checks, charge, done);
    return;
  }
  if (charge && may_wait && grantComing(checks)) {
    workerLeases()->waiting.push_back(Leases::Waiter{std::vector<LimitCheck>(checks.begin(), checks.end()), std::move(done)});
    return;
  }
  if (conn->cluster() && checks.size() > 1) {
    const std::uint16_t slot = conn->slotOf(checks[0].key);
    for (const auto& c : checks.subspan(1))
      if (conn->slotOf(c.key) != slot) return decideAcrossSlots(*conn, checks, charge, std::move(done));
  }
  // The checks' keys are views of the caller's counter names, which outlive the request
  // (the filter chain the request pinned); only the array is copied.
  struct Call {
    std::array<LimitCheck, Admission::kMaxChecks> checks;
    std::array<std::int64_t, Admission::kMaxChecks> want{};
    std::size_t n = 0;
    bool charge = false;
    std::string marker;  // empty: nothing to undo should the answer be lost
    std::function<void(const Admission&)> done;
  };
  auto call = std::make_shared<Call>();
  std::copy(checks.begin(), checks.end(), call->checks.begin());
  call->n = checks.size();
  call->charge = charge;
  call->done = std::move(done);
  for (std::size_t i = 0; i < checks.size(); ++i) call->want[i] = charge ? leaseWant(checks[i]) : 0;
  if (charge && needsMarker(checks, call->want.data())) call->marker = adjustmentMarker(checks[0].key, "adm");
  ArgScratch& a = admissionCall(admit_sha_, checks, charge, call->want.data(), call->marker);
  const std::span<const LimitCheck> asked(call->checks.data(), call->n);
  leaseAsked(asked, call->want.data(), true);
  conn->send(a.finish(), [this, call, conn](std::optional<RedisReply> r) {
    Admission adm;
    std::array<std::int64_t, Admission::kMaxChecks> charged{};
    if (unusableServer(r)) conn->close();
    const std::span<const LimitCheck> saved(call->checks.data(), call->n);
    if (!r || !parseAdmission(*r, call->n, adm, charged.data())) {
      leaseAsked(saved, call->want.data(), false);
      markUp(false, !r ? conn->lastError() : r->isError() ? "script error" : "unexpected reply");
      if (r && r->isError()) log::error("redis admission script failed", {{"error", r->str}});
      // Decided here instead; what Redis may have charged meanwhile is undone there.
      if (!call->marker.empty() && mayHaveApplied(r)) undoAdmission(saved, std::move(call->marker));
      decideLocally(saved, call->charge, call->done);
      admitWaiting();
      return;
    }
    markUp(true, "");
    if (call->charge) recordGrants(saved, charged.data(), adm);
    call->done(adm);
    admitWaiting();
  });
}

// A cluster request whose counters live in several slots (a tenant's and a model's, say):
// one script per slot, sent together. When one refuses, the slots that charged are
// refunded (a calibration, sent within 20 ms): for that moment a concurrent request may
// see those counters fuller than they are — never emptier, so no limit is exceeded.
// (No leases here: a lease taken in one slot would be refunded whenever another refuses.)
void RedisStore::decideAcrossSlots(RedisClient& conn, std::span<const LimitCheck> checks, bool charge,
                                   std::function<void(const Admission&)> done) {
  struct Across {
    std::array<LimitCheck, Admission::kMaxChecks> checks;
    std::size_t n = 0;
    bool charge = false;
    std::vector<std::vector<std::uint8_t>> groups;  // indexes into checks, per slot
    std::vector<std::optional<Admission>> results;
    std::size_t left = 0;
    const char* why = "";
    std::function<void(const Admission&)> done;
  };
  auto across = std::make_shared<Across>();
  std::copy(checks.begin(), checks.end(), across->checks.begin());
  across->n = checks.size();
  across->charge = charge;
  across->done = std::move(done);
  {
    std::vector<std::uint16_t> slots;
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const std::uint16_t slot = conn.slotOf(checks[i].key);
      const auto at = std::find(slots.begin(), slots.end(), slot) - slots.begin();
      if (static_cast<std::size_t>(at) == slots.size()) {
        slots.push_back(slot);
        across->groups.emplace_back();
      }
      across->groups[at].push_back(static_cast<std::uint8_t>(i));
    }
  }
  across->results.resize(across->groups.size());
  across->left = across->groups.size();
  auto finish = [this](Across& x) {
    bool failed = false, allowed = true;
    for (const auto& r : x.results) {
      failed |= !r;
      allowed &= r && r->allowed;
    }
    // Whatever was charged stays only if every slot allowed.
    if (x.charge && (failed || !allowed))
      for (std::size_t g = 0; g < x.groups.size(); ++g)
        if (x.results[g] && x.results[g]->allowed)
          for (std::uint8_t i : x.groups[g])
            if (x.checks[i].cost > 0) queueAdjustment(x.checks[i], x.results[g]->at_ms, -x.checks[i].cost);
    const std::span<const LimitCheck> all(x.checks.data(), x.n);
    if (failed) {
      markUp(false, x.why);
      return decideLocally(all, x.charge, x.done);
    }
    markUp(true, "");
    Admission a;
    a.count = x.n;
    a.allowed = allowed;
    a.denied = Admission::kMaxChecks;
    a.at_ms = x.results[0]->at_ms;
    for (std::size_t g = 0; g < x.groups.size(); ++g) {
      const Admission& r = *x.results[g];
      for (std::size_t j = 0; j < x.groups[g].size(); ++j) a.decisions[x.groups[g][j]] = r.decisions[j];
      if (!r.allowed && r.denied < x.groups[g].size()) a.denied = std::min<std::size_t>(a.denied, x.groups[g][r.denied]);
    }
    x.done(a);
  };
  for (std::size_t g = 0; g < across->groups.size(); ++g) {
    const auto& group = across->groups[g];
    std::array<LimitCheck, Admission::kMaxChecks> in_slot;
    for (std::size_t j = 0; j < group.size(); ++j) in_slot[j] = checks[group[j]];
    const std::span<const LimitCheck> slot_checks(in_slot.data(), group.size());
    auto marker = std::make_shared<std::string>();
    if (charge && needsMarker(slot_checks, nullptr)) *marker = adjustmentMarker(in_slot[0].key, "adm");
    ArgScratch& a = admissionCall(admit_sha_, slot_checks, charge, nullptr, *marker);
    conn.send(a.finish(), [this, across, g, &conn, finish, marker](std::optional<RedisReply> r) {
      Admission adm;
      std::array<std::int64_t, Admission::kMaxChecks> charged{};
      if (unusableServer(r)) conn.close();
      if (r && parseAdmission(*r, across->groups[g].size(), adm, charged.data())) {
        across->results[g] = adm;
      } else {
        if (!marker->empty() && mayHaveApplied(r)) {
          std::array<LimitCheck, Admission::kMaxChecks> mine;
          for (std::size_t j = 0; j < across->groups[g].size(); ++j) mine[j] = across->checks[across->groups[g][j]];
          undoAdmission(std::span<const LimitCheck>(mine.data(), across->groups[g].size()), std::move(*marker));
        }
        across->why = !r ? conn.lastError() : r->isError() ? "script error" : "unexpected reply";
        if (r && r->isError()) log::error("redis admission script failed", {{"error", r->str}});
      }
      if (--across->left == 0) finish(*across);
    });
  }
}

void RedisStore::decideLocally(std::span<const LimitCheck> checks, bool charge, const std::function<void(const Admission&)>& done) {
  // Each replica takes its share of every shared limit.
  const std::int64_t replicas = static_cast<std::int64_t>(std::max<std::uint64_t>(1, replicas_.load()));
  std::vector<LimitCheck> scaled(checks.begin(), checks.end());
  for (auto& c : scaled) c.spec.limit = std::max<std::int64_t>(1, (c.spec.limit + replicas - 1) / replicas);
  auto finish = [&](const Admission& local) {
    Admission a = local;
    a.local = true;
    // Quotas and budgets are billing: what is spent while Redis is away still counts
    // against the shared period when it is back (queued like a calibration, bounded).
    // Rates need no catching up: their windows and buckets move on.
    if (charge && a.allowed)
      for (std::size_t i = 0; i < checks.size(); ++i)
        if (checks[i].spec.kind == LimitKind::Quota && checks[i].cost != 0) queueAdjustment(checks[i], a.at_ms, checks[i].cost);
    for (std::size_t i = 0; i < a.count; ++i) {
      LimitDecision& d = a.decisions[i];
      // Too large for this replica's share, not for the limit: a wait (for Redis) helps.
      if (d.never && checks[i].cost <= checks[i].spec.limit) {
        d.never = false;
        d.retry_after_ms = 1'000;
      }
    }
    done(a);
  };
  if (charge) ++local_decisions_;
  if (charge) local_.admit(scaled, finish);
  else local_.peek(scaled, finish);
}

void RedisStore::adjust(const LimitCheck& check, std::int64_t charged_ms, std::int64_t delta, bool local) {
  if (delta == 0 || check.spec.kind == LimitKind::Window) return;
  if (local) {
    const std::int64_t replicas = static_cast<std::int64_t>(std::max<std::uint64_t>(1, replicas_.load()));
    LimitCheck scaled = check;
    scaled.spec.limit = std::max<std::int64_t>(1, (check.spec.limit + replicas - 1) / replicas);
    local_.adjust(scaled, charged_ms, delta, true);
    if (check.spec.kind == LimitKind::Quota) queueAdjustment(check, charged_ms, delta);  // see decideLocally
    return;
  }
  queueAdjustment(check, charged_ms, delta);
}

void RedisStore::queueAdjustment(const LimitCheck& check, std::int64_t charged_ms, std::int64_t delta) {
  AdjustBatch* batch = adjustBatch().get();
  if (!batch) {  // not a worker's thread: straight to the control thread's retry list
    std::vector<std::string> args{"2", std::string(check.key), adjustmentMarker(check.key)};
    for (auto& a : checkArgs(check)) args.push_back(std::move(a));
    args.push_back(std::to_string(charged_ms));
    args.push_back(std::to_string(delta));
    keepAdjustment(std::move(args));
    return;
  }
  // Called for every finished request with token or budget limits: the counter's sum is
  // the one found last for it (Recent), or its key is built in the batch's own buffer and
  // only copied when it is new.
  AdjustBatch::Recent& recent = batch->recentFor(check.key);
  PendingAdjustment* sum = nullptr;
  if (recent.at == check.key.data() && recent.size == check.key.size() && charged_ms >= recent.from_ms && charged_ms < recent.to_ms &&
      std::memcmp(recent.key->data(), check.key.data(), check.key.size()) == 0) {
    sum = recent.sum;
  } else {
    std::string& key = batch->key;
    key.assign(check.key);
    std::int64_t from_ms = std::numeric_limits<std::int64_t>::min(), to_ms = std::numeric_limits<std::int64_t>::max();
    const auto suffix = [&key](std::int64_t id) {
      char digits[24];
      key += '#';
      key.append(digits, std::to_chars(digits, digits + sizeof digits, id).ptr);
    };
    if (check.spec.kind == LimitKind::Quota) {
      const Period period = periodOf(check.spec.calendar, charged_ms);
      suffix(period.id);
      from_ms = charged_ms;  // (its start is not known here: from this time on)
      to_ms = period.end_ms;
    } else if (check.spec.kind == LimitKind::Window) {
      const std::int64_t length = std::max<std::int64_t>(1, check.spec.period_ms), window = charged_ms / length;
      suffix(window);
      from_ms = window * length;
      to_ms = from_ms + length;
    }
    auto at = batch->pending.find(std::string_view(key));
    if (at == batch->pending.end()) at = batch->pending.emplace(key, PendingAdjustment{}).first;
    sum = &at->second;
    recent = AdjustBatch::Recent{check.key.data(), check.key.size(), from_ms, to_ms, &at->first, sum};
  }
  PendingAdjustment& p = *sum;
  if (p.delta == 0) {
    p.spec = check.spec;
    p.charged_ms = charged_ms;
  }
  p.delta += delta;
  if (batch->armed) return;
  batch->armed = true;
  batch->timer->expires_after(kAdjustEvery);
  batch->timer->async_wait([this](auto ec) {
    if (!ec) flushAdjustments();
  });
}

void RedisStore::flushWorker(std::function<void()> done) {
  Leases* leases = workerLeases().get();
  if (!leases || !adjustBatch()) return done();
  leases->closed = true;
  if (leases->renewals_in_flight > 0) {  // their grants are returned with the rest
    leases->after_renewals = [this, done = std::move(done)]() mutable { flushWorker(std::move(done)); };
    return;
  }
  if (leases->sweep) leases->sweep->cancel();
  for (auto& [key, lease] : leases->map) returnLease(key, lease);
  leases->forgetRecent();
  leases->map.clear();
  if (adjustBatch()->timer) adjustBatch()->timer->cancel();
  flushAdjustments(std::move(done));
}

void RedisStore::flushAdjustments(std::function<void()> done) {
  AdjustBatch& batch = *adjustBatch();
  batch.armed = false;
  RedisClient* conn = workerClient().get();
  // `done` once every call of this flush is answered (or failed: then kept).
  auto finished = std::make_shared<std::function<void()>>(std::move(done));
  auto pending = std::make_shared<std::size_t>(1);
  auto one = [finished, pending] {
    if (--*pending == 0 && *finished) (*finished)();
  };
  // One script call per kAdjustPerCommand counters; what Redis does not take is kept
  // for the control thread to send later.
  std::vector<std::vector<std::string>> sent;
  auto send = [&] {
    if (sent.empty()) return;
    // The whole call, its marker included, is what is kept and sent again: the
    // marker makes a call Redis applied (and whose answer was lost) count once.
    std::vector<std::string> call;
    call.reserve(2 + 7 * sent.size());
    call.push_back(std::to_string(sent.size() + 1));
    for (const auto& args : sent) call.push_back(args[1]);
    call.push_back(adjustmentMarker(sent.front()[1]));
    for (const auto& args : sent)
      for (std::size_t i = 2; i < args.size(); ++i) call.push_back(args[i]);
    sent.clear();
    if (!conn || !conn->usable()) {
      keepAdjustment(std::move(call));
      return;
    }
    ArgScratch& a = argScratch();
    a.begin(24 * call.size());
    a.view("EVALSHA");
    a.view(adjust_sha_);
    for (const auto& x : call) a.view(x);
    auto kept = std::make_shared<std::vector<std::string>>(std::move(call));
    ++*pending;
    conn->send(a.finish(), [this, kept, conn, one](std::optional<RedisReply> r) {
      if (unusableServer(r)) conn->close();
      if (!r || r->isError()) keepAdjustment(std::move(*kept));
      one();
    });
  };
  std::vector<std::pair<std::uint16_t, std::vector<std::string>>> all;
  for (auto& [key, p] : batch.pending) {
    if (p.delta == 0) continue;
    const std::string counter = key.substr(0, key.find('#'));
    LimitCheck c{counter, p.spec, 0};
    std::vector<std::string> args{"1", counter};
    for (auto& x : checkArgs(c)) args.push_back(std::move(x));
    args.push_back(std::to_string(p.charged_ms));
    args.push_back(std::to_string(p.delta));
    all.emplace_back(conn ? conn->slotOf(counter) : 0, std::move(args));
    p.delta = 0;
  }
  // In a cluster one script call touches one slot: the counters go slot by slot.
  if (conn && conn->cluster())
    std::stable_sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (std::size_t i = 0; i < all.size(); ++i) {
    sent.push_back(std::move(all[i].second));
    if (sent.size() == kAdjustPerCommand || i + 1 == all.size() || all[i + 1].first != all[i].first) send();
  }
  // The counters stay in the map (no allocation next time), up to a bound.
  if (batch.pending.size() > 10'000) {
    batch.pending.clear();
    batch.recent.fill(AdjustBatch::Recent{});
  }
  one();
}

// "tahua:{<the counter's hash tag>}:adj:<replica>:<n>": in the counter's cluster slot,
// unique per call.
std::string RedisStore::adjustmentMarker(std::string_view counter, std::string_view kind) {
  std::string_view tag = counter;
  if (auto open = counter.find('{'); open != std::string_view::npos)
    if (auto close = counter.find('}', open + 1); close != std::string_view::npos && close > open + 1)
      tag = counter.substr(open + 1, close - open - 1);
  return "tahua:{" + std::string(tag) + "}:" + std::string(kind) + ":" + replica_id_ + ":" +
         std::to_string(adjustment_calls_.fetch_add(1, std::memory_order_relaxed));
}

void RedisStore::undoAdmission(std::span<const LimitCheck> checks, std::string marker) {
  std::vector<std::string> args{std::to_string(checks.size() + 1)};
  for (const auto& c : checks) args.emplace_back(c.key);
  args.push_back(std::move(marker));
  for (const auto& c : checks)
    for (auto& x : checkArgs(c)) args.push_back(std::move(x));
  ++undone_admissions_;
  keepAdjustment(std::move(args), true);
}

void RedisStore::keepAdjustment(std::vector<std::string> args, bool undo) {
  std::lock_guard lock(mu_);
  if (kept_.size() >= kMaxKeptAdjustments) {
    if (dropped_++ == 0)
      log::error("redis store: calibrations waiting for Redis exceed 100,000; dropping the oldest (counted in "
                 "tahua_store_adjustments_dropped_total)");
    kept_.pop_front();
  }
  kept_.push_back(KeptCall{std::move(args), undo});
}

}  // namespace tahua
