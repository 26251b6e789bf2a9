// The lookup filter (store/id_filter.h): sized as the formulas say, never a false
// "absent" for an id it was told of, near its false-positive rate, trusted only when
// rebuilt, and a cache of misses that a racing write cannot poison.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "store/id_filter.h"

namespace tahua {
namespace id_filter_test {  // named, not anonymous: eight test files compile as one unit

using namespace std::chrono_literals;

TEST(IdFilter, IsSizedFromTheExpectedIdsAndRate) {
  const IdFilter seed(10'000'000, 0.01, Millis(60'000));  // the seed's figures
  EXPECT_NEAR(static_cast<double>(seed.bits()), 95'850'584.0, 64.0);  // ~11.4 MiB
  EXPECT_EQ(seed.probes(), 7u);
  const IdFilter small(1'000, 0.001, Millis(0));
  EXPECT_NEAR(static_cast<double>(small.bits()), 14'378.0, 64.0);
  EXPECT_EQ(small.probes(), 10u);
}

TEST(IdFilter, NeverSaysAbsentForAnAddedIdAndKeepsItsFalsePositiveRate) {
  IdFilter f(100'000, 0.01, Millis(0));
  EXPECT_EQ(f.check("tahua:kv:p:x"), IdFilter::Verdict::Ask) << "not trusted before it is built";
  f.startRebuild();
  for (int i = 0; i < 100'000; ++i) f.add("tahua:kv:p:id-" + std::to_string(i));
  f.rebuilt();
  ASSERT_TRUE(f.ready());
  for (int i = 0; i < 100'000; ++i) ASSERT_EQ(f.check("tahua:kv:p:id-" + std::to_string(i)), IdFilter::Verdict::Ask) << i;
  int passed = 0;
  for (int i = 0; i < 100'000; ++i) passed += f.check("tahua:kv:p:other-" + std::to_string(i)) == IdFilter::Verdict::Ask;
  EXPECT_LT(passed, 1'500) << "about 1% of unknown ids reach the store";
  EXPECT_GT(passed, 500);
}

TEST(IdFilter, OverItsCapacityOrWithoutItsSubscriptionItIsNotTrusted) {
  IdFilter f(1'000, 0.01, Millis(0));
  f.startRebuild();
  for (int i = 0; i < 1'100; ++i) f.add("id-" + std::to_string(i));
  f.rebuilt();
  EXPECT_FALSE(f.ready()) << "more ids than it was sized for";
  EXPECT_GT(f.ids(), 1'000u);
  const auto counted = f.ids();
  f.add("id-7");  // heard twice (its own notification): counted once
  EXPECT_EQ(f.ids(), counted);
  f.startRebuild();
  f.add("a");
  f.rebuilt();
  EXPECT_TRUE(f.ready());
  EXPECT_EQ(f.check("never-written"), IdFilter::Verdict::Absent);
  f.distrust();
  EXPECT_EQ(f.check("never-written"), IdFilter::Verdict::Ask);
}

TEST(IdFilter, AMissIsRememberedForItsTtlUnlessAWriteRacedTheLookup) {
  IdFilter f(1'000, 0.01, Millis(50));
  f.startRebuild();
  f.rebuilt();  // misses answer only while the filter is trusted
  // Ids the filter may hold (else it answers Absent itself): where a miss is remembered.
  for (const char* id : {"k", "k2", "k3"}) f.add(id);
  const std::uint64_t stamp = f.stamp("k");
  f.missed("k", stamp);
  EXPECT_EQ(f.check("k"), IdFilter::Verdict::Missed);
  f.add("k");  // written meanwhile (here or by another replica): forgotten at once
  EXPECT_EQ(f.check("k"), IdFilter::Verdict::Ask);
  const std::uint64_t before = f.stamp("k2");
  f.add("k2");             // a write that lands while the lookup is in flight...
  f.missed("k2", before);  // ...and the store's "no such id", sent before it
  EXPECT_EQ(f.check("k2"), IdFilter::Verdict::Ask) << "the racing write wins";
  f.missed("k3", f.stamp("k3"));
  std::this_thread::sleep_for(60ms);  // the TTL itself is what is tested here
  EXPECT_EQ(f.check("k3"), IdFilter::Verdict::Ask);
}

}  // namespace id_filter_test
}  // namespace tahua
