// Deployment picking (src/routing/balancer.*): every policy's distribution with a fixed
// seed, the canary split, outlier ejection and the latency estimate.
//
// Statistical bounds: a share measured over N = 100,000 picks has a standard deviation of
// sqrt(p(1-p)/N), at most 0.16 percentage points (p = 0.5). The bounds below are
// ±1 point (over 6 sd: with the fixed seeds the result is deterministic anyway, and a
// change of seed or of the standard library's generator still never flakes), while any
// wrong policy is off by several points: uniform instead of 90/10 is 40 points off, "always
// the least loaded" instead of power of two choices gives 100% instead of 50%, and so on.
#include "routing/balancer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace tahua {
namespace balancer_test {  // named, not anonymous: eight test files compile as one unit

using namespace std::chrono_literals;

constexpr int kPicks = 100'000;
constexpr double kTol = 0.01;  // ±1 percentage point
// A fixed, arbitrary "now" (not the real clock: the tests are deterministic).
const SteadyClock::time_point T0 = SteadyClock::time_point{} + 1000h;

// One model's deployment group with this worker's state for each deployment.
struct Group {
  ModelConfig model;
  std::vector<std::unique_ptr<DeploymentState>> owned;
  std::vector<DeploymentState*> states;
  NodeTable nodes;
  bool with_nodes = true;

  explicit Group(BalancePolicy p = BalancePolicy::WeightedRandom) {
    model.name = "m";
    model.balancing = p;
  }

  DeploymentState& add(std::string id, std::uint32_t weight = 100, std::string version = "stable") {
    DeploymentConfig d;
    d.id = id;
    d.provider = "p";
    d.node = id;
    d.weight = weight;
    d.version = std::move(version);
    d.index = model.deployments.size();
    model.deployments.push_back(std::move(d));
    owned.push_back(std::make_unique<DeploymentState>());
    states.push_back(owned.back().get());
    return *owned.back();
  }
  DeploymentState& state(std::size_t i) { return *owned[i]; }

  // A node status report for deployment i's node.
  NodeStatus& report(std::size_t i, double util, double mem, double conns, double queued,
                     NodeState st = NodeState::Healthy, SteadyClock::time_point at = T0 - 1s) {
    NodeStatus& s = nodes[model.deployments[i].node];
    s = NodeStatus{};
    s.gpu_util = util;
    s.gpu_memory = mem;
    s.active_connections = conns;
    s.queued_requests = queued;
    s.state = st;
    s.reported = at;
    return s;
  }

  PickResult pick(Balancer& b, SteadyClock::time_point now = T0, std::string_view pin = {}, std::string_view sticky = {}) {
    markCanaryDeployments(model);
    PickRequest r;
    r.model = &model;
    r.states = std::span<DeploymentState* const>(states);
    r.nodes = with_nodes ? &nodes : nullptr;
    r.now = now;
    r.pin_version = pin;
    r.sticky_key = sticky;
    return b.pick(r);
  }

  // Share of each deployment over n picks.
  std::vector<double> shares(Balancer& b, int n = kPicks, SteadyClock::time_point now = T0, std::string_view pin = {},
                             std::string_view sticky = {}) {
    std::vector<int> counts(model.deployments.size());
    for (int i = 0; i < n; ++i) ++counts.at(pick(b, now, pin, sticky).index);
    std::vector<double> out;
    for (int c : counts) out.push_back(static_cast<double>(c) / n);
    return out;
  }
};

// ---------------------------------------------------------------- weighted_random

TEST(BalancerWeightedRandom, NinetyTen) {
  Group g;
  g.add("a", 90);
  g.add("b", 10);
  Balancer b(1);
  auto s = g.shares(b);
  EXPECT_NEAR(s[0], 0.90, kTol);
  EXPECT_NEAR(s[1], 0.10, kTol);
}

TEST(BalancerWeightedRandom, OneTwoSeven) {
  Group g;
  g.add("a", 1);
  g.add("b", 2);
  g.add("c", 7);
  Balancer b(2);
  auto s = g.shares(b);
  EXPECT_NEAR(s[0], 0.1, kTol);
  EXPECT_NEAR(s[1], 0.2, kTol);
  EXPECT_NEAR(s[2], 0.7, kTol);
}

TEST(BalancerWeightedRandom, WeightZeroNeverPickedUnlessAllAreZero) {
  Group g;
  g.add("a", 100);
  g.add("zero", 0);
  g.add("c", 100);
  Balancer b(3);
  auto s = g.shares(b);
  EXPECT_EQ(s[1], 0.0);
  EXPECT_NEAR(s[0], 0.5, kTol);
  EXPECT_NEAR(s[2], 0.5, kTol);

  Group z;
  z.add("a", 0);
  z.add("b", 0);
  z.add("c", 0);
  auto u = z.shares(b);
  for (double x : u) EXPECT_NEAR(x, 1.0 / 3, kTol);
}

TEST(BalancerWeightedRandom, ProviderThrottleShrinksTheShare) {
  Group g;
  g.add("a", 100);
  g.add("b", 100).throttle = 0.25;  // weight 100 * 0.25 against 100: 20%
  Balancer b(4);
  auto s = g.shares(b);
  EXPECT_NEAR(s[1], 0.2, kTol);
}

TEST(BalancerWeightedRandom, SingleDeploymentIsPickedWithoutADecision) {
  Group g;
  g.add("only", 0);
  Balancer b(5);
  auto r = g.pick(b);
  EXPECT_EQ(r.index, 0u);
  EXPECT_EQ(r.reason, "single");
}

// ---------------------------------------------------------------- round_robin

TEST(BalancerRoundRobin, SmoothSequenceForFiveOneOne) {
  Group g(BalancePolicy::RoundRobin);
  g.add("a", 5);
  g.add("b", 1);
  g.add("c", 1);
  Balancer b(6);
  std::string seq;
  for (int i = 0; i < 21; ++i) seq += g.model.deployments[g.pick(b).index].id;
  EXPECT_EQ(seq, "aabacaa" "aabacaa" "aabacaa");
}

TEST(BalancerRoundRobin, ExactSharesAndEqualWeightsAlternate) {
  Group g(BalancePolicy::RoundRobin);
  g.add("a", 500);
  g.add("b", 100);
  g.add("c", 100);
  g.add("zero", 0);
  Balancer b(7);
  std::vector<int> counts(4);
  for (int i = 0; i < 70'000; ++i) ++counts[g.pick(b).index];
  EXPECT_EQ(counts, (std::vector<int>{50'000, 10'000, 10'000, 0}));

  Group e(BalancePolicy::RoundRobin);
  e.add("a");
  e.add("b");
  e.add("c");
  std::string seq;
  for (int i = 0; i < 9; ++i) seq += e.model.deployments[e.pick(b).index].id;
  EXPECT_EQ(seq, "abcabcabc");
}

TEST(BalancerRoundRobin, SkipsAnEjectedDeployment) {
  Group g(BalancePolicy::RoundRobin);
  g.add("a");
  g.add("b").ejected_until = T0 + 1s;
  g.add("c");
  Balancer b(8);
  std::string seq;
  for (int i = 0; i < 6; ++i) seq += g.model.deployments[g.pick(b).index].id;
  EXPECT_EQ(seq, "acacac");
}

// ---------------------------------------------------------------- least_outstanding (P2C)
//
// Power of two choices over n candidates with distinct loads: two distinct candidates
// are drawn uniformly, the less loaded wins. The candidate ranked k-th (0 = least
// loaded) wins when paired with one of the n-1-k more loaded: P = 2(n-1-k) / (n(n-1)).
// So the most loaded gets exactly nothing (with 2 candidates, 10 outstanding vs 0: 0%),
// which also proves the pair is never the same deployment twice: a pair (x, x) would
// hand the most loaded a pick.

TEST(BalancerLeastOutstanding, TheLoadedOneOfTwoGetsNothing) {
  Group g(BalancePolicy::LeastOutstanding);
  g.add("busy").outstanding = 10;
  g.add("idle");
  Balancer b(9);
  auto s = g.shares(b);
  EXPECT_EQ(s[0], 0.0);
  EXPECT_EQ(s[1], 1.0);
}

TEST(BalancerLeastOutstanding, PowerOfTwoChoicesShares) {
  Group g(BalancePolicy::LeastOutstanding);
  for (std::uint32_t load : {2u, 0u, 3u, 1u}) g.add("d" + std::to_string(load)).outstanding = load;
  Balancer b(10);
  auto s = g.shares(b);
  // n = 4: ranks 0..3 get 6/12, 4/12, 2/12, 0.
  EXPECT_NEAR(s[1], 0.5, kTol);      // 0 outstanding
  EXPECT_NEAR(s[3], 1.0 / 3, kTol);  // 1
  EXPECT_NEAR(s[0], 1.0 / 6, kTol);  // 2
  EXPECT_EQ(s[2], 0.0);              // 3: never the cheaper of a distinct pair
}

TEST(BalancerLeastOutstanding, OneLoadedAmongTenIdle) {
  Group g(BalancePolicy::LeastOutstanding);
  g.add("busy").outstanding = 10;
  for (int i = 0; i < 9; ++i) g.add("idle" + std::to_string(i));
  Balancer b(11);
  auto s = g.shares(b);
  EXPECT_EQ(s[0], 0.0);
  for (int i = 1; i < 10; ++i) EXPECT_NEAR(s[i], 1.0 / 9, kTol);
}

TEST(BalancerLeastOutstanding, ASlowStartingEndpointCountsAsBusier) {
  Group g(BalancePolicy::LeastOutstanding);
  g.add("warm").outstanding = 5;
  g.add("new");
  g.model.deployments[1].ramp = 0.1f;  // just joined: (0 + 1) / 0.1 = 10 > (5 + 1) / 1
  Balancer b(13);
  EXPECT_EQ(g.shares(b)[1], 0.0);
  g.model.deployments[1].ramp = 1;  // ramped up: the idle one wins again
  EXPECT_EQ(g.shares(b)[1], 1.0);
}

TEST(BalancerLeastOutstanding, EqualLoadIsSpreadEvenly) {
  Group g(BalancePolicy::LeastOutstanding);
  for (int i = 0; i < 3; ++i) g.add("d" + std::to_string(i)).outstanding = 4;
  Balancer b(12);
  for (double x : g.shares(b)) EXPECT_NEAR(x, 1.0 / 3, kTol);
}

TEST(BalancerLeastOutstanding, ThrottleMakesADeploymentLookBusier) {
  Group g(BalancePolicy::LeastOutstanding);
  auto& a = g.add("a");
  a.outstanding = 2;
  a.throttle = 0.1;  // costs 20
  g.add("b").outstanding = 5;
  Balancer b(13);
  EXPECT_EQ(g.shares(b)[0], 0.0);
}

// ---------------------------------------------------------------- latency (peak EWMA, P2C)

DeploymentState& measured(DeploymentState& s, double ewma_ms) {
  s.has_latency = true;
  s.ewma_ms = ewma_ms;
  return s;
}

TEST(BalancerLatency, PrefersLowEwma) {
  Group g(BalancePolicy::Latency);
  measured(g.add("slow"), 100);
  measured(g.add("fast"), 10);
  measured(g.add("mid"), 50);
  Balancer b(14);
  auto s = g.shares(b);
  EXPECT_NEAR(s[1], 2.0 / 3, kTol);
  EXPECT_NEAR(s[2], 1.0 / 3, kTol);
  EXPECT_EQ(s[0], 0.0);
}

TEST(BalancerLatency, UnmeasuredDeploymentIsTried) {
  Group g(BalancePolicy::Latency);
  measured(g.add("known"), 20);
  g.add("new");
  Balancer b(15);
  EXPECT_EQ(g.shares(b)[1], 1.0);
}

TEST(BalancerLatency, PenalisesConsecutiveFailuresAndLoad) {
  Group g(BalancePolicy::Latency);
  auto& fast = measured(g.add("fast"), 10);
  measured(g.add("steady"), 40);
  Balancer b(16);
  EXPECT_EQ(g.shares(b, 1000)[0], 1.0);
  fast.consecutive_failures = 4;  // (10+1)*5 = 55 > 41
  EXPECT_EQ(g.shares(b, 1000)[0], 0.0);
  fast.consecutive_failures = 0;
  fast.outstanding = 9;  // (10+1)*10 = 110 > 41
  EXPECT_EQ(g.shares(b, 1000)[0], 0.0);
}

// ---------------------------------------------------------------- gpu_aware

TEST(BalancerGpuAware, LoadScoreFormulaWithSeedWeights) {
  GpuScoreConfig c;  // 40 util, 30 memory, 20 per 10 connections, 10 per 5 queued, x1.5 degraded
  NodeStatus s;
  s.gpu_util = 0.5;
  s.gpu_memory = 0.5;
  s.active_connections = 10;
  s.queued_requests = 5;
  EXPECT_DOUBLE_EQ(loadScore(s, c), 65.0);  // 40*.5 + 30*.5 + 20 + 10
  s.state = NodeState::Degraded;
  EXPECT_DOUBLE_EQ(loadScore(s, c), 97.5);
  s.state = NodeState::Overloaded;
  EXPECT_TRUE(std::isinf(loadScore(s, c)));
  s.state = NodeState::Unhealthy;
  EXPECT_TRUE(std::isinf(loadScore(s, c)));
  s = NodeStatus{};
  s.gpu_util = 1;
  s.gpu_memory = 1;
  s.active_connections = 20;
  s.queued_requests = 10;
  EXPECT_DOUBLE_EQ(loadScore(s, c), 40 + 30 + 40 + 20);
}

TEST(BalancerGpuAware, NodeStateNamesRoundTrip) {
  for (auto s : {NodeState::Healthy, NodeState::Degraded, NodeState::Overloaded, NodeState::Unhealthy})
    EXPECT_EQ(parseNodeState(nodeStateName(s)), s);
  EXPECT_FALSE(parseNodeState("healthy").has_value());
}

TEST(BalancerGpuAware, LiveStatusHonoursTtl) {
  GpuScoreConfig c;  // status_ttl 15 s
  NodeTable t;
  t["n"].reported = T0 - 15s;
  EXPECT_NE(liveStatus(&t, "n", c, T0), nullptr);  // exactly the ttl: still live
  EXPECT_EQ(liveStatus(&t, "n", c, T0 + 1ms), nullptr);
  EXPECT_EQ(liveStatus(&t, "other", c, T0), nullptr);
  EXPECT_EQ(liveStatus(nullptr, "n", c, T0), nullptr);
}

TEST(BalancerGpuAware, BestThreeGetTheSeedsSixtyThirtyTen) {
  Group g(BalancePolicy::GpuAware);
  for (int i = 0; i < 4; ++i) g.add("n" + std::to_string(i));
  // Scores: n0 30, n1 10, n2 40, n3 20 (utilisation only: 40 * util).
  g.report(0, 0.75, 0, 0, 0);
  g.report(1, 0.25, 0, 0, 0);
  g.report(2, 1.00, 0, 0, 0);
  g.report(3, 0.50, 0, 0, 0);
  Balancer b(17);
  auto s = g.shares(b);
  EXPECT_NEAR(s[1], 0.6, kTol);
  EXPECT_NEAR(s[3], 0.3, kTol);
  EXPECT_NEAR(s[0], 0.1, kTol);
  EXPECT_EQ(s[2], 0.0);  // 4th with top = 3

  g.model.gpu.split = {1, 1};  // configurable: an even split of the best two
  g.model.gpu.top = 2;
  s = g.shares(b);
  EXPECT_NEAR(s[1], 0.5, kTol);
  EXPECT_NEAR(s[3], 0.5, kTol);
  EXPECT_EQ(s[0], 0.0);

  g.model.gpu.top = 1;
  EXPECT_EQ(g.shares(b, 1000)[1], 1.0);
}

TEST(BalancerGpuAware, UnhealthyOverloadedAndOverEjectScoreGetNothingWhileOthersExist) {
  Group g(BalancePolicy::GpuAware);
  for (int i = 0; i < 5; ++i) g.add("n" + std::to_string(i));
  g.report(0, 0, 0, 0, 0, NodeState::Unhealthy);
  g.report(1, 0, 0, 0, 0, NodeState::Overloaded);
  g.report(2, 1, 1, 20, 10);  // 130 > eject_score 90
  g.report(3, 1, 0, 5, 0);    // 40 + 10 = 50
  // n4 never reported: scores as an idle node (0).
  Balancer b(18);
  auto s = g.shares(b);
  EXPECT_EQ(s[0], 0.0);
  EXPECT_EQ(s[1], 0.0);
  EXPECT_EQ(s[2], 0.0);
  EXPECT_NEAR(s[4], 2.0 / 3, kTol);
  EXPECT_NEAR(s[3], 1.0 / 3, kTol);
}

TEST(BalancerGpuAware, EverythingGoesToTheBadOnesWhenAllAreBad) {
  Group g(BalancePolicy::GpuAware);
  for (int i = 0; i < 3; ++i) g.add("n" + std::to_string(i));
  g.report(0, 0, 0, 0, 0, NodeState::Unhealthy);
  g.report(1, 0, 0, 0, 0, NodeState::Overloaded);
  g.report(2, 1, 1, 20, 10);  // 130: bad, but finite, so ranked first
  Balancer b(19);
  auto s = g.shares(b);
  EXPECT_NEAR(s[2], 0.6, kTol);
  EXPECT_NEAR(s[0] + s[1], 0.4, kTol);
  EXPECT_GT(s[0], 0.1);
  EXPECT_GT(s[1], 0.1);
}

TEST(BalancerGpuAware, ReportOlderThanTtlIsIgnored) {
  Group g(BalancePolicy::GpuAware);
  g.add("a");
  g.add("b");
  g.report(0, 1, 0, 5, 0);  // 50, live
  g.report(1, 0, 0, 0, 0, NodeState::Unhealthy, T0 - 20s);  // stale (ttl 15 s): as if unreported
  Balancer b(20);
  auto s = g.shares(b);
  EXPECT_NEAR(s[1], 2.0 / 3, kTol);
  EXPECT_NEAR(s[0], 1.0 / 3, kTol);

  g.report(1, 0, 0, 0, 0, NodeState::Unhealthy, T0 - 2s);  // fresh again
  EXPECT_EQ(g.shares(b, 1000)[1], 0.0);
}

TEST(BalancerGpuAware, UsesTheNodeIdNotTheDeploymentId) {
  Group g(BalancePolicy::GpuAware);
  g.add("a");
  g.add("b");
  g.model.deployments[0].node = "gpu-7";
  g.report(0, 0, 0, 0, 0, NodeState::Unhealthy);  // reported under "gpu-7"
  ASSERT_TRUE(g.nodes.contains("gpu-7"));
  Balancer b(21);
  EXPECT_EQ(g.shares(b, 1000)[0], 0.0);
}

TEST(BalancerGpuAware, EqualScoresAreSpreadOverAllNodes) {
  // No reports (no status feed yet, or every report expired): every node scores 0. Ties
  // must not always rank in config order, or the first three would take 60/30/10% and
  // the others nothing.
  Group g(BalancePolicy::GpuAware);
  for (int i = 0; i < 6; ++i) g.add("n" + std::to_string(i));
  g.with_nodes = false;
  Balancer b(22);
  for (double x : g.shares(b)) EXPECT_NEAR(x, 1.0 / 6, kTol);

  g.with_nodes = true;
  for (int i = 0; i < 6; ++i) g.report(i, 0.5, 0.5, 10, 5);  // all 65
  for (double x : g.shares(b)) EXPECT_NEAR(x, 1.0 / 6, kTol);
}

// ---------------------------------------------------------------- canary

// Two stable deployments and one canary; 10% to the canary.
Group canaryGroup(double percent = 10) {
  Group g;
  g.add("s1");
  g.add("s2");
  g.add("c1", 100, "canary");
  g.model.canary.enabled = true;
  g.model.canary.version = "canary";
  g.model.canary.percent = percent;
  g.model.canary.allow = {"alice"};
  return g;
}

TEST(BalancerCanary, PercentSplit) {
  Group g = canaryGroup(10);
  Balancer b(23);
  auto s = g.shares(b);
  EXPECT_NEAR(s[2], 0.10, kTol);
  EXPECT_NEAR(s[0], 0.45, kTol);
  EXPECT_NEAR(s[1], 0.45, kTol);
  EXPECT_EQ(g.pick(b).reason, "percent");
}

TEST(BalancerCanary, FractionalPercent) {
  Group g = canaryGroup(0.5);
  Balancer b(24);
  EXPECT_NEAR(g.shares(b)[2], 0.005, 0.002);  // sd 0.02 points
  Group none = canaryGroup(0);
  EXPECT_EQ(none.shares(b)[2], 0.0);
  Group all = canaryGroup(100);
  EXPECT_EQ(all.shares(b)[2], 1.0);
}

TEST(BalancerCanary, PinSelectsThePinnedVersion) {
  Group g = canaryGroup(10);
  Balancer b(25);
  for (int i = 0; i < 1000; ++i) {
    auto r = g.pick(b, T0, "canary");
    ASSERT_EQ(r.index, 2u);
    ASSERT_EQ(r.reason, "pin");
    ASSERT_FALSE(r.fallback_to_stable);
  }
  auto s = g.shares(b, kPicks, T0, "stable");
  EXPECT_EQ(s[2], 0.0);
  EXPECT_NEAR(s[0], 0.5, kTol);
}

TEST(BalancerCanary, PinToAnUnknownVersionFallsBackToStable) {
  Group g = canaryGroup(50);
  Balancer b(26);
  for (int i = 0; i < 1000; ++i) {
    auto r = g.pick(b, T0, "v9");
    ASSERT_NE(r.index, 2u);
    ASSERT_TRUE(r.fallback_to_stable);
    ASSERT_EQ(r.reason, "pin");
  }
}

TEST(BalancerCanary, PinBeatsAllowList) {
  Group g = canaryGroup(100);
  Balancer b(27);
  for (int i = 0; i < 1000; ++i) ASSERT_NE(g.pick(b, T0, "stable", "alice").index, 2u);
}

TEST(BalancerCanary, AllowListAlwaysGetsTheCanary) {
  Group g = canaryGroup(0);
  Balancer b(28);
  for (int i = 0; i < 1000; ++i) {
    auto r = g.pick(b, T0, {}, "alice");
    ASSERT_EQ(r.index, 2u);
    ASSERT_EQ(r.reason, "allow");
  }
  auto [v, why] = chooseVersion(g.model, {}, "bob", b.rng());
  EXPECT_EQ(v, "");  // 0%: not on the list, stable
  EXPECT_EQ(why, "sticky");
}

TEST(BalancerCanary, StickyKeyStaysOnOneSideAcrossCallsAndInstances) {
  Group g = canaryGroup(10);
  Balancer b1(29), b2(30), b3(0xdeadbeef);
  int canary_keys = 0;
  constexpr int kKeys = 2000;
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "user-" + std::to_string(k);
    const bool canary = g.pick(b1, T0, {}, key).index == 2;
    canary_keys += canary;
    for (int i = 0; i < 20; ++i) {
      Balancer& b = i % 3 == 0 ? b1 : i % 3 == 1 ? b2 : b3;
      auto r = g.pick(b, T0, {}, key);
      ASSERT_EQ(r.index == 2, canary) << key;
      ASSERT_EQ(r.reason, "sticky");
    }
    auto [v1, w1] = chooseVersion(g.model, {}, key, b2.rng());
    EXPECT_EQ(v1 == "canary", canary);
  }
  EXPECT_GT(canary_keys, 0);
  EXPECT_LT(canary_keys, kKeys / 2);
}

TEST(BalancerCanary, StickyHashSplitsKeysByPercent) {
  Group g = canaryGroup(10);
  Balancer b(31);
  int canary = 0;
  for (int k = 0; k < kPicks; ++k) canary += chooseVersion(g.model, {}, "user-" + std::to_string(k), b.rng()).first == "canary";
  EXPECT_NEAR(static_cast<double>(canary) / kPicks, 0.10, kTol);
  EXPECT_EQ(stickyHash("user-1"), stickyHash(std::string("user-") + "1"));
  EXPECT_NE(stickyHash("user-1"), stickyHash("user-2"));
}

TEST(BalancerCanary, DisabledCanaryIgnoresVersionsAndKeys) {
  Group g = canaryGroup(100);
  g.model.canary.enabled = false;
  Balancer b(32);
  auto s = g.shares(b, kPicks, T0, {}, "alice");
  for (double x : s) EXPECT_NEAR(x, 1.0 / 3, kTol);
  EXPECT_EQ(g.pick(b).reason, "none");
}

TEST(BalancerCanary, EmptyCanarySubsetFallsBackToStable) {
  Group g;
  g.add("s1");
  g.add("s2");
  g.model.canary.enabled = true;
  g.model.canary.version = "canary";
  g.model.canary.percent = 100;
  Balancer b(33);
  for (int i = 0; i < 1000; ++i) {
    auto r = g.pick(b);
    ASSERT_TRUE(r.fallback_to_stable);
    ASSERT_EQ(r.reason, "percent");
  }
  auto s = g.shares(b);
  EXPECT_NEAR(s[0], 0.5, kTol);
}

TEST(BalancerCanary, NoStableEitherUsesEverything) {
  Group g;
  g.add("c1", 100, "canary");
  g.add("c2", 100, "canary");
  g.model.canary.enabled = true;
  g.model.canary.percent = 0;
  Balancer b(34);
  auto r = g.pick(b);
  EXPECT_TRUE(r.fallback_to_stable);
  auto s = g.shares(b);
  EXPECT_NEAR(s[0], 0.5, kTol);
  EXPECT_NEAR(s[1], 0.5, kTol);
}

// ---------------------------------------------------------------- outlier ejection

OutlierConfig outlier3() {
  OutlierConfig c;
  c.consecutive_failures = 3;
  c.eject_for = 30s;
  c.max_eject_for = 300s;
  return c;
}

TEST(BalancerEjection, EjectsAfterConsecutiveFailures) {
  const OutlierConfig c = outlier3();
  DeploymentState s;
  recordOutcome(s, c, true, T0);
  recordOutcome(s, c, true, T0);
  EXPECT_LE(s.ejected_until, T0);
  recordOutcome(s, c, true, T0);
  EXPECT_EQ(s.ejected_until, T0 + 30s);
  EXPECT_EQ(s.ejections, 1u);
  EXPECT_EQ(s.consecutive_failures, 0u);
  EXPECT_EQ(s.requests, 3u);
  EXPECT_EQ(s.failures, 3u);
  // More failures while ejected (requests still in flight) do not extend it.
  for (int i = 0; i < 5; ++i) recordOutcome(s, c, true, T0 + 1s);
  EXPECT_EQ(s.ejected_until, T0 + 30s);
}

TEST(BalancerEjection, SuccessInBetweenResetsTheCount) {
  const OutlierConfig c = outlier3();
  DeploymentState s;
  recordOutcome(s, c, true, T0);
  recordOutcome(s, c, true, T0);
  recordOutcome(s, c, false, T0);
  recordOutcome(s, c, true, T0);
  recordOutcome(s, c, true, T0);
  EXPECT_LE(s.ejected_until, T0);
  EXPECT_EQ(s.consecutive_failures, 2u);
}

TEST(BalancerEjection, ZeroThresholdNeverEjects) {
  OutlierConfig c = outlier3();
  c.consecutive_failures = 0;
  DeploymentState s;
  for (int i = 0; i < 100; ++i) recordOutcome(s, c, true, T0);
  EXPECT_LE(s.ejected_until, T0);
}

TEST(BalancerEjection, BackOffDoublesUpToTheMaximum) {
  const OutlierConfig c = outlier3();
  DeploymentState s;
  auto t = T0;
  for (auto expect : {30s, 60s, 120s, 240s, 300s, 300s}) {
    for (int i = 0; i < 3; ++i) recordOutcome(s, c, true, t);
    ASSERT_EQ(s.ejected_until - t, expect);
    t = s.ejected_until;  // back in, and failing straight away
  }
}

TEST(BalancerEjection, SuccessAfterTheEjectionResetsTheBackOff) {
  const OutlierConfig c = outlier3();
  DeploymentState s;
  for (int i = 0; i < 3; ++i) recordOutcome(s, c, true, T0);
  recordOutcome(s, c, false, T0 + 10s);  // in flight, finished while ejected: no reset
  EXPECT_EQ(s.ejections, 1u);
  auto t = T0 + 30s;
  for (int i = 0; i < 3; ++i) recordOutcome(s, c, true, t);
  EXPECT_EQ(s.ejected_until, t + 60s);
  t += 60s;
  recordOutcome(s, c, false, t);  // healthy again
  EXPECT_EQ(s.ejections, 0u);
  for (int i = 0; i < 3; ++i) recordOutcome(s, c, true, t + 1s);
  EXPECT_EQ(s.ejected_until, t + 1s + 30s);
}

TEST(BalancerEjection, EjectedDeploymentGetsNoPicksUntilEjectedUntil) {
  const OutlierConfig c = outlier3();
  Group g;
  auto& bad = g.add("bad");
  g.add("good");
  for (int i = 0; i < 3; ++i) recordOutcome(bad, c, true, T0);
  Balancer b(35);
  EXPECT_EQ(g.shares(b, 10'000, T0)[0], 0.0);
  EXPECT_EQ(g.shares(b, 10'000, T0 + 30s - 1ms)[0], 0.0);
  EXPECT_NEAR(g.shares(b, kPicks, T0 + 30s)[0], 0.5, kTol);
}

TEST(BalancerEjection, ThrottledUntilExcludes) {
  Group g(BalancePolicy::LeastOutstanding);
  g.add("a").throttled_until = T0 + 2s;
  g.add("b").outstanding = 50;
  Balancer b(36);
  EXPECT_EQ(g.shares(b, 10'000, T0)[0], 0.0);
  EXPECT_EQ(g.shares(b, 10'000, T0 + 2s)[0], 1.0);  // back, and the least loaded
}

TEST(BalancerEjection, AllEjectedStillPicksAmongThem) {
  Group g;
  g.add("a").ejected_until = T0 + 10s;
  g.add("b").throttled_until = T0 + 10s;
  Balancer b(37);
  auto s = g.shares(b);
  EXPECT_NEAR(s[0], 0.5, kTol);
  EXPECT_NEAR(s[1], 0.5, kTol);

  g.add("c");
  EXPECT_EQ(g.shares(b, 1000)[2], 1.0);
}

TEST(BalancerEjection, AnEjectedCanarySendsItsShareToStable) {
  // Every canary deployment is ejected: its users go to a usable stable deployment
  // instead of a failing one (ejected ones get traffic only when nothing else is left).
  Group g = canaryGroup(10);
  g.state(2).ejected_until = T0 + 10s;
  g.state(0).ejected_until = T0 + 10s;
  Balancer b(38);
  auto s = g.shares(b);
  EXPECT_EQ(s[2], 0.0);
  EXPECT_EQ(s[0], 0.0);
  EXPECT_EQ(s[1], 1.0);
}

// ---------------------------------------------------------------- recordLatency (peak EWMA)

TEST(BalancerLatencyEstimate, JumpsUpAtOnceAndDecaysDownOverTime) {
  DeploymentState s;
  recordLatency(s, 100, T0);
  EXPECT_TRUE(s.has_latency);
  EXPECT_DOUBLE_EQ(s.ewma_ms, 100);
  recordLatency(s, 500, T0 + 1ms);
  EXPECT_DOUBLE_EQ(s.ewma_ms, 500);  // peak: no smoothing upwards

  recordLatency(s, 100, T0 + 1ms);  // no time passed: nothing forgotten
  EXPECT_DOUBLE_EQ(s.ewma_ms, 500);
  recordLatency(s, 100, T0 + 10s + 1ms);  // one time constant (10 s)
  EXPECT_NEAR(s.ewma_ms, 100 + 400 * std::exp(-1.0), 1e-6);

  double prev = s.ewma_ms;
  auto t = T0 + 10s + 1ms;
  for (int i = 0; i < 60; ++i) {
    t += 1s;
    recordLatency(s, 100, t);
    ASSERT_LT(s.ewma_ms, prev);
    ASSERT_GE(s.ewma_ms, 100);
    prev = s.ewma_ms;
  }
  EXPECT_NEAR(s.ewma_ms, 100, 1.0);  // 70 s later: ~0.1% of the peak left
  recordLatency(s, 300, t + 1ms);
  EXPECT_DOUBLE_EQ(s.ewma_ms, 300);
}

}  // namespace balancer_test
}  // namespace tahua

namespace tahua {
namespace balancer_test {

TEST(BalancerEjection, ErrorRateOverAWindowEjects) {
  OutlierConfig c;
  c.consecutive_failures = 0;  // only the rate
  c.error_rate = 20;
  c.interval = std::chrono::milliseconds(60'000);
  c.min_requests = 10;
  c.eject_for = std::chrono::milliseconds(30'000);
  DeploymentState s;
  const auto t0 = SteadyClock::time_point{} + std::chrono::hours(1);
  // 1 failure in 9 successes: 10% < 20%, no ejection; never two failures in a row.
  for (int i = 0; i < 9; ++i) recordOutcome(s, c, false, t0);
  recordOutcome(s, c, true, t0);
  EXPECT_LE(s.ejected_until, t0);
  // Another failure: 2 of 11 = 18%: still below.
  recordOutcome(s, c, true, t0);
  EXPECT_LE(s.ejected_until, t0);
  // A third: 3 of 12 = 25% >= 20%: ejected.
  recordOutcome(s, c, true, t0);
  EXPECT_GT(s.ejected_until, t0);
  EXPECT_EQ(s.ejected_until, t0 + std::chrono::milliseconds(30'000));
}

TEST(BalancerEjection, ErrorRateNeedsMinRequestsAndForgetsOldWindows) {
  OutlierConfig c;
  c.consecutive_failures = 0;
  c.error_rate = 50;
  c.interval = std::chrono::milliseconds(1'000);
  c.min_requests = 4;
  DeploymentState s;
  const auto t0 = SteadyClock::time_point{} + std::chrono::hours(1);
  recordOutcome(s, c, true, t0);
  recordOutcome(s, c, true, t0);
  recordOutcome(s, c, true, t0);
  EXPECT_LE(s.ejected_until, t0);  // 3 calls < min_requests
  // The window rolls over: the old failures no longer count.
  const auto t1 = t0 + std::chrono::milliseconds(1'500);
  recordOutcome(s, c, false, t1);
  recordOutcome(s, c, false, t1);
  recordOutcome(s, c, false, t1);
  recordOutcome(s, c, true, t1);
  EXPECT_LE(s.ejected_until, t1);  // 1 of 4 = 25% < 50%
  recordOutcome(s, c, true, t1);
  recordOutcome(s, c, true, t1);
  EXPECT_GT(s.ejected_until, t1);  // 3 of 6 = 50%
}

}  // namespace balancer_test
}  // namespace tahua
