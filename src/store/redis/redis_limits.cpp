// The Redis store's limit decisions (one script call per request, on the worker's own
// connection), the per-replica fallback, and calibrations summed per worker. The leases
// that spare most requests the call are in redis_leases.cpp.
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
#include "store/redis/redis_admission.h"
#include "store/redis/redis_detail.h"
#include "store/redis/redis_scripts.h"

namespace tahua {
namespace asio = boost::asio;
using namespace redis_detail;


void RedisStore::admit(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) {
  decide(checks, true, std::move(done));
}

void RedisStore::peek(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) {
  decide(checks, false, std::move(done));
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
