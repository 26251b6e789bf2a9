// The limit algorithms, as pure functions over plain state with the time passed in
// (unix milliseconds): unit-tested against a fake clock, used as they are by the
// in-process store, and mirrored step for step by the Redis store's scripts.
//
// - Window: a sliding-window counter (the current fixed window's count plus the previous
//   one's, weighted by how much of it still overlaps the sliding window). O(1) state per
//   counter instead of one entry per request. It assumes the previous window's requests
//   were spread evenly; the worst case (all of them at its very end) lets a true sliding
//   window of the same length see up to 2 x limit - 1 (docs/tenants-and-limits.md works
//   the bound out). From a cold start, and with steady traffic, it is exact.
// - Bucket: a token bucket holding up to `limit`, refilled at `limit` per period, that
//   may go into debt when calibration charges more than was reserved.
// - Quota: a count over a calendar period (`period_id`), reset when the period changes.
#pragma once

#include <cstdint>

namespace tahua {

enum class LimitKind : std::uint8_t { Window, Bucket, Quota };
enum class Calendar : std::uint8_t { Day, Month };  // a quota's period, in UTC

struct LimitState {
  std::int64_t a = 0;  // window: the current window's start; bucket: last update; quota: period id
  std::int64_t b = 0;  // window: previous window's count;    bucket: unused;      quota: used
  std::int64_t c = 0;  // window: current window's count;     bucket: unused
  double tokens = 0;   // bucket: tokens held (may be negative: debt)
  bool fresh = true;   // never touched: a bucket starts full
};

// What a limit says about one request.
struct LimitDecision {
  bool allowed = true;
  bool never = false;            // the cost exceeds the whole limit: no wait makes it pass
  std::int64_t remaining = 0;    // what is left after this request (allowed) or now (refused)
  std::int64_t reset_ms = 0;     // until the limit is back to its full allowance
  std::int64_t retry_after_ms = 0;  // refused (and not never): until this cost could pass
};

struct LimitSpec {
  LimitKind kind = LimitKind::Window;
  std::int64_t limit = 0;
  std::int64_t period_ms = 60'000;    // window length; bucket: time to refill `limit`
  Calendar calendar = Calendar::Day;  // quota
};

// The calendar period holding `now_ms`: its number (days or months since 1970) and its
// end (unix ms). The store's clock decides, so every replica agrees on the day.
struct Period {
  std::int64_t id = 0;
  std::int64_t end_ms = 0;
};
Period periodOf(Calendar calendar, std::int64_t now_ms);

// Checks `cost` against the limit at `now_ms` and, when `charge` and allowed, takes it.
LimitDecision applyLimit(const LimitSpec& spec, LimitState& state, std::int64_t now_ms, std::int64_t cost, bool charge);

// Takes `cost`, which applyLimit(..., now_ms, cost, false) has just allowed on this state:
// the same as charging in that call, without deciding again (a store that checks several
// limits before it charges any decides each once).
void chargeLimit(const LimitSpec& spec, LimitState& state, std::int64_t cost);

// Calibration: adds `delta` (negative: a refund) to what a bucket or quota was charged
// at `charged_ms`. A quota charged in a period that has ended is left alone (the new
// period owes nothing of the old). Windows count requests, which are never refunded.
void adjustLimit(const LimitSpec& spec, LimitState& state, std::int64_t now_ms, std::int64_t charged_ms, std::int64_t delta);

}  // namespace tahua
