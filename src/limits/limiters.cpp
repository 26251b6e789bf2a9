#include "limits/limiters.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace tahua {
namespace {

// Moves a window counter to the fixed window holding `now`.
void roll(const LimitSpec& s, LimitState& st, std::int64_t now) {
  const std::int64_t start = now - now % s.period_ms;
  if (st.a == start) return;
  st.b = st.a == start - s.period_ms ? st.c : 0;
  st.c = 0;
  st.a = start;
}

LimitDecision window(const LimitSpec& s, LimitState& st, std::int64_t now, std::int64_t cost, bool charge) {
  const std::int64_t P = s.period_ms;
  roll(s, st, now);
  const std::int64_t elapsed = now - st.a;
  // In units of 1/P request: estimate * P = previous * (P - elapsed) + current * P.
  const __int128 used = static_cast<__int128>(st.b) * (P - elapsed) + static_cast<__int128>(st.c) * P;
  const __int128 cap = static_cast<__int128>(s.limit) * P;
  LimitDecision d;
  d.never = cost > s.limit;
  d.allowed = !d.never && used + static_cast<__int128>(cost) * P <= cap;
  if (d.allowed && charge) st.c += cost;
  const __int128 after = used + (d.allowed ? static_cast<__int128>(cost) * P : 0);
  d.remaining = after >= cap ? 0 : static_cast<std::int64_t>((cap - after) / P);
  const std::int64_t current = st.c + (d.allowed && !charge ? cost : 0);
  d.reset_ms = current > 0 ? (P - elapsed) + P : st.b > 0 ? P - elapsed : 0;
  if (!d.allowed && !d.never) {
    // Earliest moment the estimate leaves room for `cost`: later in this window (the
    // previous window's weight decays), or in the next (this one's count decays).
    const std::int64_t room = s.limit - st.c - cost;
    if (room >= 0 && st.b > 0) {
      // previous * (P - e) <= room * P  <=>  e >= P - room * P / previous
      const std::int64_t e = P - static_cast<std::int64_t>(static_cast<__int128>(room) * P / st.b);
      d.retry_after_ms = std::max<std::int64_t>(1, e - elapsed);
    } else {
      // Next window: previous' = current; current * (P - e) <= (limit - cost) * P.
      const std::int64_t e =
          st.c > 0 ? std::max<std::int64_t>(0, P - static_cast<std::int64_t>(static_cast<__int128>(s.limit - cost) * P / st.c)) : 0;
      d.retry_after_ms = (P - elapsed) + e;
    }
  }
  return d;
}

void refill(const LimitSpec& s, LimitState& st, std::int64_t now) {
  if (st.fresh) {
    st.tokens = static_cast<double>(s.limit);
    st.a = now;
    st.fresh = false;
    return;
  }
  if (now > st.a) {
    st.tokens = std::min(static_cast<double>(s.limit),
                         st.tokens + static_cast<double>(now - st.a) * static_cast<double>(s.limit) / static_cast<double>(s.period_ms));
    st.a = now;
  }
}

LimitDecision bucket(const LimitSpec& s, LimitState& st, std::int64_t now, std::int64_t cost, bool charge) {
  refill(s, st, now);
  LimitDecision d;
  const double c = static_cast<double>(cost);
  d.never = cost > s.limit;
  d.allowed = !d.never && st.tokens >= c;
  if (d.allowed && charge) st.tokens -= c;
  const double left = st.tokens - (d.allowed && !charge ? c : 0);
  d.remaining = left <= 0 ? 0 : static_cast<std::int64_t>(std::floor(left));
  const double rate = static_cast<double>(s.limit) / static_cast<double>(s.period_ms);  // tokens per ms
  d.reset_ms = static_cast<std::int64_t>(std::ceil((static_cast<double>(s.limit) - left) / rate));
  if (!d.allowed && !d.never) d.retry_after_ms = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil((c - st.tokens) / rate)));
  return d;
}

LimitDecision quota(const LimitSpec& s, LimitState& st, std::int64_t now, std::int64_t cost, bool charge) {
  const Period period = periodOf(s.calendar, now);
  if (st.fresh || st.a != period.id) {
    st.a = period.id;
    st.b = 0;
    st.fresh = false;
  }
  LimitDecision d;
  d.never = cost > s.limit;
  d.allowed = !d.never && st.b + cost <= s.limit;
  if (d.allowed && charge) st.b += cost;
  const std::int64_t used = st.b + (d.allowed && !charge ? cost : 0);
  d.remaining = std::max<std::int64_t>(0, s.limit - used);
  d.reset_ms = std::max<std::int64_t>(0, period.end_ms - now);
  if (!d.allowed && !d.never) d.retry_after_ms = std::max<std::int64_t>(1, d.reset_ms);
  return d;
}

}  // namespace

Period periodOf(Calendar calendar, std::int64_t now_ms) {
  using namespace std::chrono;
  const sys_days day = floor<days>(sys_time<milliseconds>(milliseconds(now_ms)));
  if (calendar == Calendar::Day)
    return {day.time_since_epoch().count(), duration_cast<milliseconds>((day + days(1)).time_since_epoch()).count()};
  const year_month_day ymd(day);
  const sys_days next = sys_days(year_month_day(ymd.year() / ymd.month() / 1) + months(1));
  return {(static_cast<int>(ymd.year()) - 1970) * 12 + static_cast<int>(static_cast<unsigned>(ymd.month())) - 1,
          duration_cast<milliseconds>(next.time_since_epoch()).count()};
}

LimitDecision applyLimit(const LimitSpec& spec, LimitState& state, std::int64_t now_ms, std::int64_t cost, bool charge) {
  switch (spec.kind) {
    case LimitKind::Window: return window(spec, state, now_ms, cost, charge);
    case LimitKind::Bucket: return bucket(spec, state, now_ms, cost, charge);
    case LimitKind::Quota: return quota(spec, state, now_ms, cost, charge);
  }
  return {};
}

void chargeLimit(const LimitSpec& spec, LimitState& state, std::int64_t cost) {
  // applyLimit has rolled the window, refilled the bucket or moved the quota to `now`.
  switch (spec.kind) {
    case LimitKind::Window: state.c += cost; return;
    case LimitKind::Bucket: state.tokens -= static_cast<double>(cost); return;
    case LimitKind::Quota: state.b += cost; return;
  }
}

void adjustLimit(const LimitSpec& spec, LimitState& state, std::int64_t now_ms, std::int64_t charged_ms, std::int64_t delta) {
  switch (spec.kind) {
    case LimitKind::Window: return;
    case LimitKind::Bucket:
      refill(spec, state, now_ms);
      state.tokens = std::min(static_cast<double>(spec.limit), state.tokens - static_cast<double>(delta));
      return;
    case LimitKind::Quota: {
      const std::int64_t period = periodOf(spec.calendar, charged_ms).id;
      if (!state.fresh && state.a == period) {
        state.b = std::max<std::int64_t>(0, state.b + delta);
      } else if (delta > 0 && (state.fresh || state.a < period)) {
        // A charge to a period this counter has not begun (spent elsewhere: a replica
        // while Redis was away) begins it; a refund there has nothing to give back.
        state.a = period;
        state.b = delta;
        state.c = 0;
        state.fresh = false;
      }
      return;
    }
  }
}

}  // namespace tahua
