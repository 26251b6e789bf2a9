// DNS discovery's config expansion: a deployment named by DNS becomes one deployment per
// endpoint (its own id, address, node and weight, with the slow start ramp), indexes and
// pick tables rebuilt; and the `dns` / `discovery` config sections.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "config/config.h"
#include "discovery/dns_discovery.h"

namespace tahua {
namespace discovery_test {  // named, not anonymous: eight test files compile as one unit

using namespace std::chrono_literals;

ConfigPtr load(const std::string& extra) {
  auto r = loadConfigString(R"(
listeners: [{port: 0}]
providers:
  - {name: up, type: openai, base_url: "http://pool.test:8000/v1", api_key: x}
  - {name: other, type: mock}
models:
  - name: llm
    deployments:
      - {id: pool, provider: up, weight: 50, dns: {name: pool.test, slow_start: 10s}}
      - {id: fixed, provider: other}
  - {name: small, provider: other}
)" + extra, "t.yaml");
  EXPECT_TRUE(r.config) << r.error;
  return r.config;
}

TEST(Discovery, DeploymentBecomesOneDeploymentPerEndpoint) {
  auto base = load("");
  const auto& pool = base->models[0].deployments[0];
  ASSERT_TRUE(pool.dns);
  EXPECT_EQ(pool.dns->port, 8000);  // the base_url's port for A records
  const auto t0 = std::chrono::steady_clock::now();
  EndpointTable table;
  table["llm/pool"] = {DiscoveredEndpoint{"10.0.0.1", 8000, 1, t0 - 20s}, DiscoveredEndpoint{"fd00::2", 8000, 3, t0}};
  Config cfg = *base;
  expandEndpoints(cfg, table, t0);
  const auto& ds = cfg.models[0].deployments;
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_EQ(ds[0].id, "pool@10.0.0.1:8000");
  EXPECT_EQ(ds[0].address, "10.0.0.1:8000");
  EXPECT_EQ(ds[0].node, "10.0.0.1:8000");
  EXPECT_EQ(ds[0].source, "dns");
  EXPECT_EQ(ds[0].weight, 50u);  // past its slow start
  EXPECT_EQ(ds[1].id, "pool@[fd00::2]:8000");
  EXPECT_EQ(ds[1].weight, 15u);  // 50 x SRV weight 3 x 10 % (just joined)
  EXPECT_EQ(ds[2].id, "fixed");
  // Every deployment of the config has its own index again.
  std::vector<std::size_t> idx;
  for (const auto& m : cfg.models)
    for (const auto& d : m.deployments) idx.push_back(d.index);
  EXPECT_EQ(idx, (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_EQ(cfg.deployment_count, 4u);
  EXPECT_EQ(cfg.models[0].stable_table.index.size(), 3u);
  EXPECT_TRUE(slowStarting(*base, table, t0));
  EXPECT_FALSE(slowStarting(*base, table, t0 + 10s));

  // Not resolved yet: as configured. Resolved to nothing and alone in its model: as
  // configured too (a model keeps a deployment).
  Config untouched = *base;
  expandEndpoints(untouched, EndpointTable{}, t0);
  EXPECT_EQ(untouched.models[0].deployments[0].id, "pool");
  EXPECT_EQ(untouched.models[0].deployments[0].source, "config");
  Config emptied = *base;
  expandEndpoints(emptied, EndpointTable{{"llm/pool", {}}}, t0);
  ASSERT_EQ(emptied.models[0].deployments.size(), 1u);
  EXPECT_EQ(emptied.models[0].deployments[0].id, "fixed");
}

TEST(Discovery, ConfigSections) {
  auto cfg = load("discovery: {resolvers: [\"127.0.0.1:5353\", \"[::1]:53\"], timeout: 500ms}\n");
  EXPECT_EQ(cfg->discovery.resolvers, (std::vector<std::string>{"127.0.0.1:5353", "[::1]:53"}));
  EXPECT_EQ(cfg->discovery.timeout, Millis(500));
  auto bad = [](const std::string& dns) {
    auto r = loadConfigString("listeners: [{port: 0}]\nproviders: [{name: up, type: mock}]\n"
                              "models: [{name: m, deployments: [{id: d, provider: up, dns: " + dns + "}]}]\n", "t.yaml");
    EXPECT_FALSE(r.config) << dns;
    return r.error;
  };
  EXPECT_NE(bad("{type: A}").find("models[0].deployments[0].dns.name: required"), std::string::npos);
  EXPECT_NE(bad("{name: x, type: MX}").find("dns.type: expected A, AAAA or SRV"), std::string::npos);
  EXPECT_NE(bad("{name: x, type: SRV, port: 80}").find("dns.port: SRV records carry the port"), std::string::npos);
  EXPECT_NE(bad("{name: x, min_ttl: 10s, max_ttl: 1s}").find("dns.max_ttl: must not be below min_ttl"), std::string::npos);
  EXPECT_NE(bad("{name: x, on_empty: drop}").find("dns.on_empty"), std::string::npos);
}

// The example of docs/routing.md (ctest runs in the source directory) loads as documented.
TEST(Discovery, GuideExampleLoads) {
  std::ifstream in("docs/routing.md");
  ASSERT_TRUE(in) << "docs/routing.md (tests run from the repository root)";
  std::stringstream text;
  text << in.rdbuf();
  const std::string guide = text.str();
  const auto section = guide.find("## Discovering upstreams");
  ASSERT_NE(section, std::string::npos);
  const auto open = guide.find("```yaml\n", section);
  ASSERT_NE(open, std::string::npos);
  const auto close = guide.find("```", open + 8);
  ASSERT_NE(close, std::string::npos);
  auto r = loadConfigString("listeners: [{port: 0}]\n" + guide.substr(open + 8, close - open - 8), "docs/routing.md");
  ASSERT_TRUE(r.config) << r.error;
  const auto& d = r.config->models.at(0).deployments.at(0);
  ASSERT_TRUE(d.dns);
  EXPECT_EQ(d.dns->name, "vllm-headless.llm.svc.cluster.local");
  EXPECT_EQ(d.dns->port, 8000);
  EXPECT_EQ(d.dns->slow_start, Millis(30'000));
  EXPECT_EQ(r.config->discovery.resolvers, (std::vector<std::string>{"10.96.0.10:53"}));
}

}  // namespace discovery_test
}  // namespace tahua
