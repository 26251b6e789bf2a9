// Micro-benchmarks of one routing decision: find the model by name in a config of 10,000
// models (Config::findModel, as the router does) and pick one of its 100 deployments with
// the Balancer (src/routing/balancer.*), as the balancer filter does, for each policy and
// with a sticky canary split. One iteration = one decision, so the reported time is the
// cost per decision (goal: well under 1 µs).
//
// Arguments: the number of distinct model names the lookups rotate over. 10000 spreads
// the decisions over every model (1,000,000 deployments, ~300 MB of config and state: all
// of it cold in the caches, the worst case); 16 is a few hot models (warm caches).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "config/config.h"
#include "filters/balancer/balancer_filter.h"
#include "filters/router/router_filter.h"
#include "routing/balancer.h"

namespace {

using namespace tahua;

constexpr std::size_t kModels = 10'000;
constexpr std::size_t kDeployments = 100;
constexpr std::size_t kCanaryDeployments = 10;  // of the 100, version "canary" (when enabled)
constexpr std::size_t kUsers = 1'000;

// Everything one worker has: the config snapshot, its state slots (one per deployment,
// resolved like BalancerFilter does), the node table, the balancer, and the request
// inputs (names and sticky keys) built up front so the loop measures only the decision.
struct World {
  Config config;
  std::vector<std::unique_ptr<DeploymentState>> owned;
  std::vector<DeploymentState*> states;
  NodeTable nodes;
  std::vector<const NodeStatus*> node_status;  // per deployment, as the balancer filter resolves it
  Balancer balancer{42};
  std::vector<std::string> names;
  std::vector<std::string> users;

  World() {
    std::mt19937_64 rng(7);
    config.source = "<bench>";
    config.providers.resize(4);
    for (std::size_t p = 0; p < config.providers.size(); ++p) config.providers[p].name = "p" + std::to_string(p);
    config.models.reserve(kModels);
    for (std::size_t m = 0; m < kModels; ++m) {
      ModelConfig mc;
      char name[32];
      std::snprintf(name, sizeof name, "model-%05zu", m);
      mc.name = name;
      mc.deployments.reserve(kDeployments);
      for (std::size_t j = 0; j < kDeployments; ++j) {
        DeploymentConfig d;
        d.id = "d" + std::to_string(j);
        d.provider_index = j % config.providers.size();
        d.provider = config.providers[d.provider_index].name;
        d.upstream_model = mc.name;
        d.weight = 50 + static_cast<std::uint32_t>(rng() % 100);
        d.version = j < kCanaryDeployments ? "canary" : "stable";
        d.node = "node-" + std::to_string(j);
        d.index = config.deployment_count++;
        mc.deployments.push_back(std::move(d));
      }
      mc.canary.version = "canary";
      mc.canary.percent = 10;
      mc.canary.sticky_header = "x-user-id";
      mc.canary.allow = {"user-tester-1", "user-tester-2"};
      config.model_index.emplace(mc.name, config.models.size());
      config.models.push_back(std::move(mc));
      names.emplace_back(name);
    }
    // Every deployment's state, with some load, latency and failures observed.
    owned.reserve(config.deployment_count);
    states.reserve(config.deployment_count);
    for (std::size_t i = 0; i < config.deployment_count; ++i) {
      auto s = std::make_unique<DeploymentState>();
      s->outstanding = static_cast<std::uint32_t>(rng() % 20);
      s->has_latency = true;
      s->ewma_ms = 50.0 + static_cast<double>(rng() % 500);
      s->consecutive_failures = rng() % 10 == 0 ? 1 : 0;
      states.push_back(s.get());
      owned.push_back(std::move(s));
    }
    // 100 inference nodes; reports dated in the future so they never expire mid-run.
    const auto at = SteadyClock::now() + std::chrono::hours(24);
    for (std::size_t j = 0; j < kDeployments; ++j) {
      NodeStatus& st = nodes["node-" + std::to_string(j)];
      st.gpu_util = static_cast<double>(rng() % 100) / 100;
      st.gpu_memory = static_cast<double>(rng() % 100) / 100;
      st.active_connections = static_cast<double>(rng() % 20);
      st.queued_requests = static_cast<double>(rng() % 10);
      const auto r = rng() % 20;
      st.state = r == 0 ? NodeState::Unhealthy : r == 1 ? NodeState::Overloaded : r < 5 ? NodeState::Degraded : NodeState::Healthy;
      st.reported = at;
    }
    for (std::size_t u = 0; u < kUsers; ++u) users.push_back("user-" + std::to_string(u * 7919));
  }

  void configure(BalancePolicy policy, bool canary) {
    if (node_status.empty()) {
      node_status.assign(config.deployment_count, nullptr);
      for (const auto& m : config.models)
        for (const auto& d : m.deployments)
          if (auto it = nodes.find(d.node); it != nodes.end()) node_status[d.index] = &it->second;
    }
    for (auto& m : config.models) {
      m.balancing = policy;
      m.canary.enabled = canary;
      markCanaryDeployments(m);
    }
  }
};

World& world() {
  static World w;  // built once (~1 s), shared by every benchmark
  return w;
}

// One decision: what the router and the balancer filter do for a request.
inline std::size_t decide(World& w, std::string_view name, std::string_view sticky) {
  const ModelConfig* model = w.config.findModel(name);
  PickRequest req;
  req.model = model;
  req.states = std::span<DeploymentState* const>(w.states.data() + model->deployments.front().index, model->deployments.size());
  req.nodes = &w.nodes;
  if (model->balancing == BalancePolicy::GpuAware)
    req.node_status = std::span<const NodeStatus* const>(w.node_status.data() + model->deployments.front().index,
                                                          model->deployments.size());
  req.now = SteadyClock::now();
  req.sticky_key = sticky;
  return w.balancer.pick(req).index;
}

void runPolicy(benchmark::State& state, BalancePolicy policy, bool canary) {
  World& w = world();
  w.configure(policy, canary);
  const std::size_t rotate = static_cast<std::size_t>(state.range(0));
  // Visit the rotated models in a scattered order (a stride coprime to 10,000), as
  // requests for different models would arrive.
  std::size_t m = 0, u = 0;
  for (auto _ : state) {
    const std::string_view sticky = canary ? std::string_view(w.users[u]) : std::string_view{};
    benchmark::DoNotOptimize(decide(w, w.names[(m * 3'779) % kModels], sticky));
    if (++m == rotate) m = 0;
    if (++u == kUsers) u = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["deployments"] = static_cast<double>(kDeployments);
}

}  // namespace

static void BM_Route_WeightedRandom(benchmark::State& s) { runPolicy(s, BalancePolicy::WeightedRandom, false); }
static void BM_Route_RoundRobin(benchmark::State& s) { runPolicy(s, BalancePolicy::RoundRobin, false); }
static void BM_Route_LeastOutstanding(benchmark::State& s) { runPolicy(s, BalancePolicy::LeastOutstanding, false); }
static void BM_Route_Latency(benchmark::State& s) { runPolicy(s, BalancePolicy::Latency, false); }
static void BM_Route_GpuAware(benchmark::State& s) { runPolicy(s, BalancePolicy::GpuAware, false); }
static void BM_Route_CanarySticky_WeightedRandom(benchmark::State& s) { runPolicy(s, BalancePolicy::WeightedRandom, true); }
static void BM_Route_CanarySticky_GpuAware(benchmark::State& s) { runPolicy(s, BalancePolicy::GpuAware, true); }

// The lookup alone, for reference.
static void BM_Route_FindModelOnly(benchmark::State& state) {
  World& w = world();
  const std::size_t rotate = static_cast<std::size_t>(state.range(0));
  std::size_t m = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(w.config.findModel(w.names[(m * 3'779) % kModels]));
    if (++m == rotate) m = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// The clock read every decision makes (PickRequest::now), for reference.
static void BM_Route_SteadyClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(SteadyClock::now());
}
BENCHMARK(BM_Route_SteadyClockNow);

// The whole decision as a request makes it, through the real filters: the router
// resolves one of 10,000 declarative routes (exact aliases, a few globs after them) to
// a model, the balancer filter picks one of its 100 deployments and releases it when
// the request completes. The config is loaded from YAML like a real one.
namespace {

struct RoutedWorld {
  ConfigPtr config;
  DeploymentStates states;
  NodeTablePtr nodes;
  Balancer balancer{43};
  std::unique_ptr<Filter> router;
  std::unique_ptr<Filter> picker;
  std::vector<std::string> aliases;

  explicit RoutedWorld(int per_group) {
    std::string y = "listeners: [{port: 0}]\nproviders:\n";
    for (int p = 0; p < 4; ++p) y += "  - {name: p" + std::to_string(p) + ", type: mock}\n";
    y += "models:\n";
    for (int m = 0; m < 100; ++m) {
      y += "  - name: m" + std::to_string(m) + "\n    deployments:\n";
      for (int d = 0; d < per_group; ++d)
        y += "      - {id: d" + std::to_string(d) + ", provider: p" + std::to_string(d % 4) + ", weight: " +
             std::to_string(50 + (d * 37) % 100) + "}\n";
    }
    y += "routes:\n";
    for (int r = 0; r < 10'000; ++r) {
      aliases.push_back("alias-" + std::to_string(r));
      y += "  - {name: r" + std::to_string(r) + ", match: {model: " + aliases.back() + "}, target: m" + std::to_string(r % 100) + "}\n";
    }
    for (int g = 0; g < 10; ++g)
      y += "  - {name: g" + std::to_string(g) + ", match: {model: \"fam" + std::to_string(g) + "-*\"}, target: m" + std::to_string(g) + "}\n";
    auto loaded = loadConfigString(y, "<bench>");
    if (!loaded.config) {
      std::fprintf(stderr, "bench config: %s\n", loaded.error.c_str());
      std::abort();
    }
    config = loaded.config;
    router = makeRouterFilter();
    picker = makeBalancerFilter(states, *config, nodes, balancer);
  }
};

}  // namespace

static void BM_RouteAndPick_10kRoutes(benchmark::State& state) {
  static RoutedWorld w100(100), w3(3);  // built once (~1-2 s)
  RoutedWorld& w = state.range(0) == 100 ? w100 : w3;
  std::size_t i = 0;
  for (auto _ : state) {
    RequestContext ctx;
    ctx.config = w.config;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.path = "/v1/chat/completions";
    ctx.facts.model = w.aliases[(i * 3'779) % w.aliases.size()];
    w.router->onUpstreamSelect(ctx);
    w.picker->onUpstreamSelect(ctx);
    benchmark::DoNotOptimize(ctx.deployment);
    ctx.status = 200;
    w.picker->onComplete(ctx);
    if (++i == w.aliases.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["routes"] = 10'010;
  state.counters["deployments"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_RouteAndPick_10kRoutes)->ArgName("deployments")->Arg(3)->Arg(100);

#define ROUTE_ARGS ->ArgName("models")->Arg(10'000)->Arg(16)
BENCHMARK(BM_Route_FindModelOnly) ROUTE_ARGS;
BENCHMARK(BM_Route_WeightedRandom) ROUTE_ARGS;
BENCHMARK(BM_Route_RoundRobin) ROUTE_ARGS;
BENCHMARK(BM_Route_LeastOutstanding) ROUTE_ARGS;
BENCHMARK(BM_Route_Latency) ROUTE_ARGS;
BENCHMARK(BM_Route_GpuAware) ROUTE_ARGS;
BENCHMARK(BM_Route_CanarySticky_WeightedRandom) ROUTE_ARGS;
BENCHMARK(BM_Route_CanarySticky_GpuAware) ROUTE_ARGS;

BENCHMARK_MAIN();
