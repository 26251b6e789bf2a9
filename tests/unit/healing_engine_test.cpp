// Self-healing rules: the loader's validation of `healing:` and the engine's decisions
// over synthetic counters and time (fire after `for`, hold on too few requests, never
// eject a model's last deployment, restore after `restore_after`, undo on rule removal),
// and the percentile estimate the ttft_p99 metric uses.
#include "healing/healing_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace tahua {
namespace healing_engine_test {  // named, not anonymous: eight test files compile as one unit

using namespace std::chrono_literals;
using Time = HealingEngine::Time;

std::string configWith(const std::string& healing) {
  return R"(listeners:
  - port: 0
providers:
  - name: mock
    type: mock
models:
  - name: m
    deployments:
      - {id: a, provider: mock}
      - {id: b, provider: mock}
    fallbacks: [backup]
  - name: backup
    provider: mock
)" + healing;
}

ConfigPtr load(const std::string& healing) {
  auto r = loadConfigString(configWith(healing), "test.yaml");
  EXPECT_TRUE(r.config) << r.error;
  return r.config;
}

// Named for this file: the unity batch that holds it may hold routes_test.cpp's loadError.
std::string healingLoadError(const std::string& healing) {
  auto r = loadConfigString(configWith(healing), "test.yaml");
  EXPECT_FALSE(r.config);
  return r.error;
}

const char* kEjectRule = R"(healing:
  interval: 1s
  rules:
    - name: eject-failing
      model: m
      deployment: "*"
      when: {metric: error_rate, above: 20, for: 2s, min_requests: 5}
      action: eject
      restore_after: 5s
)";

// Counters for deployment a and b of model m, cumulative.
HealthSample sample(std::uint64_t a_req, std::uint64_t a_fail, std::uint64_t b_req = 0, std::uint64_t b_fail = 0) {
  HealthSample s;
  s[{"m", "a"}] = HealthCounters{a_req, a_fail, {}};
  s[{"m", "b"}] = HealthCounters{b_req, b_fail, {}};
  return s;
}

TEST(HealingConfig, RulesAreValidatedWithFieldPaths) {
  EXPECT_NE(healingLoadError("healing: {rules: [{name: r, model: nope, action: eject, deployment: a, when: {metric: error_rate, above: 5}}]}")
                .find("healing.rules[0].model: unknown model \"nope\""),
            std::string::npos);
  EXPECT_NE(healingLoadError("healing: {rules: [{name: r, model: m, action: eject, when: {metric: error_rate, above: 5}}]}")
                .find("healing.rules[0].action: eject needs `deployment`"),
            std::string::npos);
  EXPECT_NE(healingLoadError("healing: {rules: [{name: r, model: backup, action: shift_to_fallback, when: {metric: ttft_p99, above: 2s}}]}")
                .find("has no fallbacks"),
            std::string::npos);
  EXPECT_NE(healingLoadError("healing: {rules: [{name: r, model: m, action: shift_to_fallback, when: {metric: p50, above: 2s}}]}")
                .find("healing.rules[0].when.metric: expected ttft_p99 or error_rate"),
            std::string::npos);
  EXPECT_NE(healingLoadError("healing: {rules: [{name: r, model: m, deployment: zz, action: eject, when: {metric: error_rate, above: 5}}]}")
                .find("has no deployment \"zz\""),
            std::string::npos);
  auto cfg = load(kEjectRule);
  ASSERT_EQ(cfg->healing.rules.size(), 1u);
  EXPECT_EQ(cfg->healing.rules[0].for_, 2s);
  EXPECT_EQ(cfg->healing.rules[0].min_requests, 5);
}

TEST(HealingEngine, EjectsAfterTheConditionHeldForItsDurationThenRestores) {
  auto cfg = load(kEjectRule);
  HealingEngine e;
  EXPECT_TRUE(e.configure(cfg->healing, *cfg).empty());
  ASSERT_EQ(e.targets().size(), 2u);  // "*": one per deployment
  Time t0{};
  EXPECT_TRUE(e.evaluate(t0, sample(0, 0)).empty());              // the first call records
  EXPECT_TRUE(e.evaluate(t0 + 1s, sample(10, 5, 10, 0)).empty());  // bad since t0: held 1 s of 2
  auto fired = e.evaluate(t0 + 2s, sample(20, 10, 20, 0));         // held 2 s: eject a, not b
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_TRUE(fired[0].fire);
  EXPECT_EQ(fired[0].deployment, "a");
  EXPECT_DOUBLE_EQ(fired[0].value, 50);
  EXPECT_EQ(fired[0].action, HealingRuleConfig::Action::Eject);
  // Ejected: no traffic. Idle windows count as healthy; restore after 5 s of them.
  EXPECT_TRUE(e.evaluate(t0 + 4s, sample(20, 10, 40, 0)).empty());
  auto restored = e.evaluate(t0 + 7s, sample(20, 10, 60, 0));
  ASSERT_EQ(restored.size(), 1u);
  EXPECT_FALSE(restored[0].fire);
  EXPECT_EQ(restored[0].deployment, "a");
}

TEST(HealingEngine, AGoodOrThinWindowStartsTheCountOver) {
  auto cfg = load(kEjectRule);
  HealingEngine e;
  e.configure(cfg->healing, *cfg);
  Time t0{};
  e.evaluate(t0, sample(0, 0));
  EXPECT_TRUE(e.evaluate(t0 + 1s, sample(10, 5)).empty());   // bad
  EXPECT_TRUE(e.evaluate(t0 + 2s, sample(12, 7)).empty());   // 2 requests < min_requests: no verdict, run ends
  EXPECT_TRUE(e.evaluate(t0 + 3s, sample(22, 12)).empty());  // bad again, 1 s
  EXPECT_TRUE(e.evaluate(t0 + 4s, sample(32, 12)).empty());  // good: run ends
  EXPECT_TRUE(e.evaluate(t0 + 5s, sample(42, 17)).empty());
  EXPECT_EQ(e.evaluate(t0 + 6s, sample(52, 22)).size(), 1u);  // bad for 2 s
}

TEST(HealingEngine, NeverEjectsTheLastDeploymentOfAModel) {
  auto cfg = load(kEjectRule);
  HealingEngine e;
  e.configure(cfg->healing, *cfg);
  Time t0{};
  e.evaluate(t0, sample(0, 0));
  e.evaluate(t0 + 1s, sample(10, 10, 10, 10));
  auto fired = e.evaluate(t0 + 2s, sample(20, 20, 20, 20));
  ASSERT_EQ(fired.size(), 1u);  // one of the two; the other is held back
  int blocked = 0;
  for (const auto& t : e.targets()) blocked += t.blocked;
  EXPECT_EQ(blocked, 1);
}

TEST(HealingEngine, ShiftOnTtftP99AndUndoWhenTheRuleIsRemoved) {
  auto cfg = load(R"(healing:
  rules:
    - name: slow
      model: m
      when: {metric: ttft_p99, above: 2s, for: 0s, min_requests: 1}
      action: shift_to_fallback
      percent: 90
      restore_after: 10m
)");
  HealingEngine e;
  e.configure(cfg->healing, *cfg);
  Time t0{};
  HealthSample s0 = sample(0, 0);
  e.evaluate(t0, s0);
  HealthSample s1 = sample(10, 0, 10, 0);
  s1[{"m", "a"}].ttft[kTtftBoundsMs.size()] = 10;  // 10 calls past the last bound
  s1[{"m", "b"}].ttft[8] = 10;                     // 10 calls in (1 s, 2.5 s]
  auto fired = e.evaluate(t0 + 10s, s1);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].action, HealingRuleConfig::Action::ShiftToFallback);
  EXPECT_EQ(fired[0].deployment, "");
  EXPECT_DOUBLE_EQ(fired[0].percent, 90);
  EXPECT_GT(fired[0].value, 2000);
  auto plain = load("");
  auto undone = e.configure(plain->healing, *plain);
  ASSERT_EQ(undone.size(), 1u);
  EXPECT_FALSE(undone[0].fire);
  EXPECT_TRUE(e.targets().empty());
}

std::string scaleRule(const std::string& extra = "") {
  return R"(kubernetes: {api_server: "https://127.0.0.1:6443", namespace: ml, token_file: "", ca_file: ""}
healing:
  interval: 1s
  rules:
    - name: scale-on-memory
      model: m
      when: {metric: gpu_memory, above: 90, for: 2s}
      action: scale
      scale: {deployment: vllm, replicas: 3, min: 1, max: 5, cooldown: 10s}
      restore_after: 2s
)" + extra;
}

TEST(HealingConfig, ScaleRulesAreValidatedWithFieldPaths) {
  auto ok = load(scaleRule());
  ASSERT_TRUE(ok);
  const auto& r = ok->healing.rules[0];
  EXPECT_EQ(r.metric, HealingRuleConfig::Metric::GpuMemory);
  EXPECT_TRUE(r.nodeMetric());
  EXPECT_EQ(r.scale.deployment, "vllm");
  EXPECT_EQ(r.scale.replicas, 3);
  EXPECT_EQ(r.scale.cooldown, 10s);
  EXPECT_EQ(ok->kubernetes.namespace_, "ml");
  // Without the kubernetes section, a scale rule has nothing to patch.
  EXPECT_NE(healingLoadError("healing: {rules: [{name: r, model: m, action: scale, scale: {deployment: d, replicas: 2}, "
                      "when: {metric: gpu_util, above: 80}}]}")
                .find("healing.rules[0].action: scale patches a Kubernetes Deployment"),
            std::string::npos);
  const std::string k = R"(kubernetes: {api_server: "http://127.0.0.1:8001", namespace: ml, token_file: "", ca_file: ""}
)";
  EXPECT_NE(healingLoadError(k + "healing: {rules: [{name: r, model: m, action: scale, when: {metric: gpu_util, above: 80}}]}")
                .find("healing.rules[0].scale: required with action scale"),
            std::string::npos);
  EXPECT_NE(healingLoadError(k + "healing: {rules: [{name: r, model: m, action: scale, scale: {deployment: d, replicas: 9, max: 4}, "
                          "when: {metric: gpu_util, above: 80}}]}")
                .find("healing.rules[0].scale.replicas: outside min..max (1..4)"),
            std::string::npos);
  EXPECT_NE(healingLoadError(k + "healing: {rules: [{name: r, model: m, action: scale, deployment: a, scale: {deployment: d, replicas: 2}, "
                          "when: {metric: gpu_util, above: 80}}]}")
                .find("healing.rules[0].deployment: scale watches the whole model"),
            std::string::npos);
  EXPECT_NE(healingLoadError(k + "healing: {rules: [{name: r, model: m, action: eject, deployment: a, scale: {deployment: d, replicas: 2}, "
                          "when: {metric: error_rate, above: 8}}]}")
                .find("healing.rules[0].scale: only with action scale"),
            std::string::npos);
  EXPECT_NE(healingLoadError(k + "healing: {rules: [{name: r, model: m, action: eject, deployment: a, "
                          "when: {metric: queued_requests, above: 8, min_requests: 3}}]}")
                .find("healing.rules[0].when.min_requests: not with a metric from the nodes' status reports"),
            std::string::npos);
  EXPECT_NE(healingLoadError("kubernetes: {api_server: \"ftp://x\", namespace: ml, token_file: \"\", ca_file: \"\"}")
                .find("kubernetes.api_server: expected an http(s) URL"),
            std::string::npos);
  EXPECT_NE(healingLoadError("kubernetes: {api_server: \"https://x\", namespace: Bad_NS, token_file: \"\", ca_file: \"\"}")
                .find("kubernetes.namespace: \"Bad_NS\" is not a namespace name"),
            std::string::npos);
  EXPECT_NE(healingLoadError("kubernetes: {api_server: \"https://x\", namespace: ml, ca_file: /nonexistent/ca.crt}")
                .find("kubernetes.ca_file: no such file: /nonexistent/ca.crt"),
            std::string::npos);
}

TEST(KubernetesConfig, PodDefaultsMissingHereAreAWarningNotAnError) {
  if (std::getenv("KUBERNETES_SERVICE_HOST")) GTEST_SKIP() << "running in a pod";
  auto r = loadConfigString(configWith("kubernetes: {resources: true}\n"), "test.yaml");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_TRUE(r.config->kubernetes.enabled);
  EXPECT_NE(r.config->kubernetes.unresolved.find("KUBERNETES_SERVICE_HOST is empty"), std::string::npos);
  EXPECT_NE(std::find(r.warnings.begin(), r.warnings.end(), r.config->kubernetes.unresolved), r.warnings.end());
  EXPECT_EQ(r.config->kubernetes.token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
}

// Node gauges for deployments a and b of model m (percent), no request counters.
HealthSample gauges(std::optional<double> a_memory, std::optional<double> b_memory) {
  HealthSample s;
  if (a_memory) s[{"m", "a"}].node = NodeGauges{*a_memory, 10, 0};
  if (b_memory) s[{"m", "b"}].node = NodeGauges{*b_memory, 10, 0};
  return s;
}

TEST(HealingEngine, ScalesOnTheLargestNodeGaugeAndWaitsForTheCooldown) {
  auto cfg = load(scaleRule());
  ASSERT_TRUE(cfg);
  HealingEngine e;
  e.configure(cfg->healing, *cfg);
  ASSERT_EQ(e.targets().size(), 1u);  // the model, not each deployment
  const Time t0{};
  e.evaluate(t0, gauges(50, 50));
  EXPECT_TRUE(e.evaluate(t0 + 1s, gauges(95, 40)).empty());  // the largest counts; bad since t0
  auto fired = e.evaluate(t0 + 2s, gauges(40, 96));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_TRUE(fired[0].fire);
  EXPECT_EQ(fired[0].action, HealingRuleConfig::Action::Scale);
  EXPECT_EQ(fired[0].scale.deployment, "vllm");
  EXPECT_DOUBLE_EQ(fired[0].value, 96);
  // Healthy for restore_after (2 s), but the cool-down (10 s since the patch) holds the undo.
  EXPECT_TRUE(e.evaluate(t0 + 3s, gauges(30, 30)).empty());
  EXPECT_TRUE(e.evaluate(t0 + 6s, gauges(30, 30)).empty());
  EXPECT_TRUE(e.evaluate(t0 + 11s, gauges(30, 30)).empty());
  auto undone = e.evaluate(t0 + 12s, gauges(30, 30));
  ASSERT_EQ(undone.size(), 1u);
  EXPECT_FALSE(undone[0].fire);
  // Bad again at once: for (2 s) has passed, but the cool-down since the undo holds it.
  EXPECT_TRUE(e.evaluate(t0 + 13s, gauges(99, std::nullopt)).empty());
  EXPECT_TRUE(e.evaluate(t0 + 16s, gauges(99, std::nullopt)).empty());
  EXPECT_EQ(e.evaluate(t0 + 22s, gauges(99, std::nullopt)).size(), 1u);
}

TEST(HealingEngine, NoLiveNodeReportIsNoVerdict) {
  auto cfg = load(scaleRule());
  ASSERT_TRUE(cfg);
  HealingEngine e;
  e.configure(cfg->healing, *cfg);
  const Time t0{};
  e.evaluate(t0, gauges(95, std::nullopt));
  EXPECT_TRUE(e.evaluate(t0 + 1s, gauges(95, std::nullopt)).empty());
  EXPECT_TRUE(e.evaluate(t0 + 2s, gauges(std::nullopt, std::nullopt)).empty());  // reports expired: the run ends
  EXPECT_TRUE(e.evaluate(t0 + 3s, gauges(95, std::nullopt)).empty());  // bad since t0 + 2 s
  EXPECT_EQ(e.evaluate(t0 + 4s, gauges(95, std::nullopt)).size(), 1u);
}

TEST(HealingEngine, PercentileInterpolatesWithinItsBucket) {
  std::array<std::uint64_t, kTtftBoundsMs.size() + 1> b{};
  EXPECT_FALSE(percentileMs(b, 0.99));
  b[7] = 100;  // (500 ms, 1000 ms]
  EXPECT_NEAR(*percentileMs(b, 0.5), 750, 1e-9);
  EXPECT_NEAR(*percentileMs(b, 0.99), 995, 1e-9);
  b[0] = 100;  // half the calls under 5 ms
  EXPECT_NEAR(*percentileMs(b, 0.25), 2.5, 1e-9);
}

}  // namespace healing_engine_test
}  // namespace tahua
