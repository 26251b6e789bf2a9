// The admission script's call and its answer, shared by the Redis store's decisions
// (redis_limits.cpp) and its leases (redis_leases.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "store/redis/redis_detail.h"
#include "store/state_store.h"

namespace tahua::redis_detail {

// The admission script's answer; `charged` gets what each check was charged (its cost
// plus a lease) when the request was allowed.
inline bool parseAdmission(const RedisReply& r, std::size_t n, Admission& a, std::int64_t* charged) {
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

inline bool sameSpec(const LimitSpec& a, const LimitSpec& b) {
  return a.kind == b.kind && a.limit == b.limit && a.period_ms == b.period_ms && a.calendar == b.calendar;
}

inline std::int64_t msSince(std::chrono::steady_clock::time_point then, std::chrono::steady_clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - then).count();
}

// The admission script's call for `checks`: their keys (and `marker`, when not empty),
// then per check its kind, limit, period, calendar, cost and the lease wanted beyond it
// (`want` null: none).
inline ArgScratch& admissionCall(std::string_view sha, std::span<const LimitCheck> checks, bool charge, const std::int64_t* want,
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
inline bool needsMarker(std::span<const LimitCheck> checks, const std::int64_t* want) {
  for (std::size_t i = 0; i < checks.size(); ++i)
    if ((want && want[i] > 0) || (checks[i].spec.kind == LimitKind::Quota && checks[i].cost != 0)) return true;
  return false;
}

// No answer, or one that is not the script's: the call may have been applied.
inline bool mayHaveApplied(const std::optional<RedisReply>& r) { return !r || !r->isError(); }

}  // namespace tahua::redis_detail
