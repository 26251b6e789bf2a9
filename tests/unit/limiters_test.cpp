// The limit algorithms against a fake clock (src/limits/limiters.h) and the in-process
// store's all-or-nothing admission (src/store/memory_store.h).
#include "limits/limiters.h"

#include <gtest/gtest.h>

#include <vector>

#include "store/memory_store.h"

namespace tahua {
namespace limiters_test {  // named, not anonymous: eight test files compile as one unit

LimitSpec window(std::int64_t limit, std::int64_t period = 60'000) { return {LimitKind::Window, limit, period}; }
LimitSpec bucket(std::int64_t limit, std::int64_t period = 60'000) { return {LimitKind::Bucket, limit, period}; }
LimitSpec daily(std::int64_t limit) { return {LimitKind::Quota, limit, 0, Calendar::Day}; }
LimitSpec monthly(std::int64_t limit) { return {LimitKind::Quota, limit, 0, Calendar::Month}; }
constexpr std::int64_t kDay = 86'400'000;

int admitted(const LimitSpec& s, LimitState& st, std::int64_t now, int tries) {
  int n = 0;
  for (int i = 0; i < tries; ++i) n += applyLimit(s, st, now, 1, true).allowed;
  return n;
}

TEST(WindowLimit, FromAColdStartExactlyTheLimitPasses) {
  LimitState st;
  const auto s = window(5);
  EXPECT_EQ(admitted(s, st, 1'000, 8), 5);
  const LimitDecision d = applyLimit(s, st, 1'000, 1, true);
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.never);
  EXPECT_EQ(d.remaining, 0);
  // Room returns in the next window once this one's 5, weighted by its remaining
  // overlap, leave room for 1: 59 s to the boundary, then 5 * (P - e) / P <= 4 at e = 12 s.
  EXPECT_EQ(d.retry_after_ms, 71'000);
}

TEST(WindowLimit, ThePreviousWindowWeighsByItsOverlap) {
  const auto s = window(10);
  LimitState st;
  EXPECT_EQ(admitted(s, st, 59'999, 10), 10);  // all at the very end of window [0, 60 s)
  // At the next window's start the estimate is still ~10: nothing passes.
  EXPECT_EQ(admitted(s, st, 60'000, 1), 0);
  // Half way through, half of the previous window still counts: 5 pass.
  EXPECT_EQ(admitted(s, st, 90'000, 10), 5);
  // One window later, only this window's 5 (weighted by the rest of it) count.
  LimitState copy = st;
  EXPECT_EQ(admitted(s, copy, 150'000, 10), 7);  // 5 * 0.5 = 2.5 -> 7 more fit
  // Two windows of silence reset everything.
  EXPECT_EQ(admitted(s, st, 240'000, 12), 10);
}

TEST(WindowLimit, RetryAfterIsWhenTheEstimateLeavesRoom) {
  const auto s = window(10);
  LimitState st;
  EXPECT_EQ(admitted(s, st, 59'999, 10), 10);
  const LimitDecision d = applyLimit(s, st, 60'000, 1, true);
  ASSERT_FALSE(d.allowed);
  // previous (10) * (P - e) / P + 0 + 1 <= 10  <=>  e >= 6 s.
  EXPECT_EQ(d.retry_after_ms, 6'000);
  EXPECT_FALSE(applyLimit(s, st, 60'000 + d.retry_after_ms - 1, 1, false).allowed);
  EXPECT_TRUE(applyLimit(s, st, 60'000 + d.retry_after_ms, 1, false).allowed);
}

TEST(WindowLimit, WorstCaseStaysBelowTwiceTheLimitInAnySlidingWindow) {
  // The documented bound: a burst at the end of one window, then as much as the
  // estimate allows through the next: a true 60 s window never sees 2 x limit.
  const auto s = window(100);
  LimitState st;
  std::vector<std::int64_t> passed;
  for (int i = 0; i < 100; ++i)
    if (applyLimit(s, st, 59'999, 1, true).allowed) passed.push_back(59'999);
  for (std::int64_t t = 60'000; t < 120'000; t += 100)
    while (applyLimit(s, st, t, 1, true).allowed) passed.push_back(t);
  std::size_t worst = 0;
  for (std::size_t i = 0, j = 0; j < passed.size(); ++j) {
    while (passed[j] - passed[i] >= 60'000) ++i;
    worst = std::max(worst, j - i + 1);
  }
  EXPECT_GT(worst, 100u);  // the approximation's price: more than the limit ...
  EXPECT_LT(worst, 200u);  // ... but never twice it
}

TEST(WindowLimit, ACostAboveTheLimitNeverPasses) {
  LimitState st;
  const LimitDecision d = applyLimit(window(3), st, 0, 4, true);
  EXPECT_FALSE(d.allowed);
  EXPECT_TRUE(d.never);
}

TEST(BucketLimit, StartsFullRefillsSteadilyAndCapsAtCapacity) {
  const auto s = bucket(600);  // 10 tokens per second
  LimitState st;
  EXPECT_TRUE(applyLimit(s, st, 0, 600, true).allowed);  // a burst of the whole capacity
  LimitDecision d = applyLimit(s, st, 0, 1, true);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 100);  // one token refills in 100 ms
  EXPECT_FALSE(applyLimit(s, st, 999, 10, true).allowed);
  EXPECT_TRUE(applyLimit(s, st, 1'000, 10, true).allowed);
  d = applyLimit(s, st, 1'000'000, 0, false);
  EXPECT_EQ(d.remaining, 600);  // never more than the capacity
  EXPECT_EQ(d.reset_ms, 0);
}

TEST(BucketLimit, CalibrationRefundsAndChargesBothWays) {
  const auto s = bucket(1'000);
  LimitState st;
  ASSERT_TRUE(applyLimit(s, st, 0, 800, true).allowed);  // reserved 800
  adjustLimit(s, st, 0, 0, 100 - 800);                      // used 100: refund 700
  EXPECT_EQ(applyLimit(s, st, 0, 0, false).remaining, 900);
  ASSERT_TRUE(applyLimit(s, st, 0, 100, true).allowed);  // reserved 100
  adjustLimit(s, st, 0, 0, 1'500 - 100);                    // used 1,500: charge 1,400 more
  const LimitDecision d = applyLimit(s, st, 0, 1, false);
  EXPECT_FALSE(d.allowed);  // in debt: 800 - 1,400 = -600
  EXPECT_EQ(d.retry_after_ms, 36'060);  // 601 tokens at 1,000 per minute
  adjustLimit(s, st, 0, 0, -100'000);      // a refund never fills past the capacity
  EXPECT_EQ(applyLimit(s, st, 0, 0, false).remaining, 1'000);
}

TEST(BucketLimit, MoreThanTheCapacityIsRefusedForGood) {
  LimitState st;
  const LimitDecision d = applyLimit(bucket(1'000), st, 0, 1'001, true);
  EXPECT_TRUE(d.never);
  EXPECT_EQ(d.retry_after_ms, 0);
}

TEST(QuotaLimit, CountsWithinAUtcDayAndStartsOverInTheNext) {
  LimitState st;
  const std::int64_t noon = 20'000 * kDay + kDay / 2;  // 2024-10-04T12:00Z
  EXPECT_TRUE(applyLimit(daily(100), st, noon, 60, true).allowed);
  LimitDecision d = applyLimit(daily(100), st, noon, 50, true);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 40);
  EXPECT_EQ(d.retry_after_ms, kDay / 2);  // at midnight UTC
  adjustLimit(daily(100), st, noon, noon, -30);  // calibrated down
  EXPECT_TRUE(applyLimit(daily(100), st, noon, 50, true).allowed);
  // Charged yesterday, calibrated today: the new day owes nothing of the old.
  const std::int64_t tomorrow = noon + kDay;
  EXPECT_TRUE(applyLimit(daily(100), st, tomorrow, 10, true).allowed);
  adjustLimit(daily(100), st, tomorrow, noon, 500);
  EXPECT_TRUE(applyLimit(daily(100), st, tomorrow, 90, true).allowed);
}

// What a replica spent while the shared store was away arrives as a calibration: on a
// counter that never saw the period (never used, or last used yesterday) it begins it.
TEST(QuotaLimit, AChargeToAPeriodNotBegunBeginsIt) {
  const std::int64_t noon = 20'000 * kDay + kDay / 2;
  LimitState fresh;
  adjustLimit(daily(100), fresh, noon, noon, -30);  // a refund: nothing to give back
  EXPECT_TRUE(fresh.fresh);
  adjustLimit(daily(100), fresh, noon, noon, 70);
  EXPECT_EQ(applyLimit(daily(100), fresh, noon, 40, false).remaining, 30);
  EXPECT_FALSE(applyLimit(daily(100), fresh, noon, 40, true).allowed);
  LimitState yesterday;
  EXPECT_TRUE(applyLimit(daily(100), yesterday, noon - kDay, 90, true).allowed);
  adjustLimit(daily(100), yesterday, noon, noon, 60);  // today's, charged elsewhere
  EXPECT_EQ(applyLimit(daily(100), yesterday, noon, 0, false).remaining, 40);
}

TEST(QuotaLimit, MonthsFollowTheCalendar) {
  EXPECT_EQ(periodOf(Calendar::Month, 0).end_ms, 31 * kDay);             // January 1970
  EXPECT_EQ(periodOf(Calendar::Month, 31 * kDay).end_ms, 59 * kDay);     // February 1970
  EXPECT_EQ(periodOf(Calendar::Month, 59 * kDay).id, 2);                 // March
  EXPECT_EQ(periodOf(Calendar::Day, kDay - 1).end_ms, kDay);
  LimitState st;
  EXPECT_TRUE(applyLimit(monthly(10), st, 31 * kDay - 1, 10, true).allowed);
  EXPECT_FALSE(applyLimit(monthly(10), st, 31 * kDay - 1, 1, true).allowed);
  EXPECT_TRUE(applyLimit(monthly(10), st, 31 * kDay, 10, true).allowed);
}

// The store decides every limit of a request before it charges any (chargeLimit): the
// same state as charging in the deciding call, for every kind, from a cold start and
// across a window's roll, a refill and a new day.
TEST(ChargeLimit, EqualsChargingInTheDecidingCall) {
  for (const LimitSpec& s : {window(10), bucket(10, 1'000), daily(10)}) {
    LimitState charged, split;
    for (const std::int64_t now : std::initializer_list<std::int64_t>{0, 5, 300, 60'001, 61'000, kDay + 1}) {
      const LimitDecision a = applyLimit(s, charged, now, 3, true);
      const LimitDecision b = applyLimit(s, split, now, 3, false);
      ASSERT_EQ(a.allowed, b.allowed) << now;
      if (b.allowed) chargeLimit(s, split, 3);
      EXPECT_EQ(a.remaining, b.remaining) << now;
      EXPECT_EQ(charged.a, split.a) << now;
      EXPECT_EQ(charged.b, split.b) << now;
      EXPECT_EQ(charged.c, split.c) << now;
      EXPECT_EQ(charged.tokens, split.tokens) << now;
    }
  }
}

TEST(MemoryStore, AdmissionIsAllOrNothing) {
  std::int64_t now = 0;
  MemoryStore store([&] { return now; });
  const LimitCheck a{"a", window(2), 1}, b{"b", window(1), 1};
  std::vector<LimitCheck> both{a, b};
  Admission got;
  auto keep = [&](const Admission& x) { got = x; };
  store.admit(both, keep);
  EXPECT_TRUE(got.allowed);
  store.admit(both, keep);  // b refuses: a is not charged either
  EXPECT_FALSE(got.allowed);
  EXPECT_EQ(got.denied, 1u);
  EXPECT_EQ(got.decisions[0].remaining, 0);  // a would have been at its limit
  EXPECT_EQ(store.peek(a).remaining, 0);     // peek: after one more; so a holds exactly 1
  EXPECT_TRUE(store.peek(a).allowed);
  EXPECT_EQ(store.counters(), 2u);
}

TEST(MemoryStore, AdjustCalibratesABucketSharedByName) {
  std::int64_t now = 0;
  MemoryStore store([&] { return now; });
  const LimitCheck c{"t:{x}:tpm", bucket(1'000), 900};
  bool allowed = false;
  store.admit(std::span<const LimitCheck>(&c, 1), [&](const Admission& a) { allowed = a.allowed; });
  ASSERT_TRUE(allowed);
  store.adjust(c, 0, -800);
  EXPECT_EQ(store.peek(LimitCheck{"t:{x}:tpm", bucket(1'000), 0}).remaining, 900);
}

}  // namespace limiters_test
}  // namespace tahua

namespace tahua {
namespace limiters_test {

TEST(Locks, OnlyTheOwnerRenewsOrReleasesAndAnExpiredLockIsFree) {
  std::int64_t now = 0;
  MemoryStore store([&] { return now; });
  bool held = false;
  auto keep = [&](bool h) { held = h; };
  store.tryLock("job", "a", Millis(1'000), keep);
  EXPECT_TRUE(held);
  store.tryLock("job", "b", Millis(1'000), keep);
  EXPECT_FALSE(held);
  store.unlock("job", "b");  // not b's: nothing happens
  store.tryLock("job", "b", Millis(1'000), keep);
  EXPECT_FALSE(held);
  now = 900;
  store.renewLock("job", "a", Millis(1'000), keep);  // until 1,900
  EXPECT_TRUE(held);
  now = 1'500;
  store.tryLock("job", "b", Millis(1'000), keep);
  EXPECT_FALSE(held) << "renewed, still a's";
  now = 1'900;
  store.tryLock("job", "b", Millis(1'000), keep);
  EXPECT_TRUE(held) << "expired: b takes it";
  store.renewLock("job", "a", Millis(1'000), keep);
  EXPECT_FALSE(held) << "a lost it and cannot renew b's";
  store.unlock("job", "a");
  store.tryLock("job", "c", Millis(1'000), keep);
  EXPECT_FALSE(held) << "a's unlock did not release b's lock";
  store.unlock("job", "b");
  store.tryLock("job", "c", Millis(1'000), keep);
  EXPECT_TRUE(held);
}

TEST(IdempotentAnswers, KeptUntilTheirTtlAndStatusZeroMeansNone) {
  std::int64_t now = 0;
  MemoryStore store([&] { return now; });
  std::optional<StateStore::Idempotent> got;
  auto keep = [&](std::optional<StateStore::Idempotent> r) { got = std::move(r); };
  store.getIdempotent("k", keep);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 0);
  store.putIdempotent("k", {"fp", 200, "application/json", "{\"ok\":true}"}, Millis(1'000));
  now = 999;
  store.getIdempotent("k", keep);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->body, "{\"ok\":true}");
  EXPECT_EQ(got->fingerprint, "fp");
  now = 1'000;
  store.getIdempotent("k", keep);
  EXPECT_EQ(got->status, 0);
}

}  // namespace limiters_test
}  // namespace tahua
