// The configuration reference is generated from the loader's tables: docs/configuration.md
// must be exactly `tahua --config-reference`, and every table must be whole (a line of
// documentation per field, defaults within their bounds, sections with their tables).
#include "config/field_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "config/config.h"
#include "config/loader_detail.h"
#include "config/provider_kind.h"
#include "core/duration.h"

namespace tahua {
namespace config_reference_test {  // named, not anonymous: eight test files compile as one unit

TEST(ConfigReference, DocsConfigurationIsTheGeneratedReference) {
  std::ifstream in("docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md (tests run from the repository root)";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(text.str() == schema::reference())
      << "docs/configuration.md differs from the tables: run `build/tahua --config-reference > docs/configuration.md`";
}

TEST(ConfigReference, EveryFieldIsDocumentedAndItsDefaultIsWithinItsBounds) {
  const auto all = schema::tables();
  ASSERT_GT(all.size(), 10u);
  std::set<std::string_view> paths;
  for (const schema::Table* t : all) {
    EXPECT_TRUE(paths.insert(t->path).second) << "two tables for " << t->path;
    EXPECT_FALSE(t->doc.empty()) << t->path;
    std::set<std::string_view> names;
    for (const schema::Field& f : t->fields) {
      const std::string where = std::string(t->path) + "." + std::string(f.name);
      EXPECT_TRUE(names.insert(f.name).second) << where << " twice";
      EXPECT_GE(f.doc.size(), 8u) << where << ": a field needs a line of documentation";
      if (f.kind == schema::Kind::Section) {
        const std::string sub = t->path.empty() ? std::string(f.name) : where;
        EXPECT_TRUE(schema::findTable(sub)) << where << " is a section without a table";
      }
      if (f.kind == schema::Kind::Choice) EXPECT_NE(f.bound.find(" | "), std::string_view::npos) << where;
      if (f.fallback.empty()) continue;
      if (f.kind == schema::Kind::Integer) {
        const double v = std::stod(std::string(f.fallback));
        EXPECT_TRUE(v >= f.min && v <= f.max) << where << " default " << f.fallback << " outside its bounds";
      }
      if (f.kind == schema::Kind::Duration) {
        const auto d = parseDuration(f.fallback);
        ASSERT_TRUE(d) << where << " default " << f.fallback;
        EXPECT_GE(static_cast<double>(d->count()), f.min) << where;
      }
      if (f.kind == schema::Kind::Boolean) EXPECT_TRUE(f.fallback == "true" || f.fallback == "false") << where;
    }
  }
}

// Every section present with only its required fields (and a second file for what
// needs the Redis store): each absent field keeps its struct's default, which must be
// the default the reference states.
constexpr const char* kEverySection = R"(server: {readiness: {}, realtime: {}, uploads: {}}
listeners: [{port: 8080}]
limits: {}
timeouts: {}
access_log: {}
providers:
  - {name: o, type: openai, base_url: "http://127.0.0.1:9/v1", circuit_breaker: {}, pool: {}, retry: {}, timeouts: {}}
  - {name: a, type: anthropic, base_url: "http://127.0.0.1:9/v1"}
  - {name: g, type: gemini, base_url: "http://127.0.0.1:9/v1beta"}
  - {name: b, type: bedrock, aws: {region: us-east-1}}
  - {name: v, type: vertex, gcp: {project: p, location: us-east5, token_file: /tmp/t}}
  - {name: z, type: azure-openai, base_url: "http://127.0.0.1:9/openai", api_version: "2024-10-21"}
  - {name: k, type: mock, mock: {}}
  - {name: t, type: mcp, base_url: "http://127.0.0.1:9/mcp"}
models:
  - {name: m, provider: k, cache: {semantic: {}}, pricing: {input: 1, output: 2}, gpu: {}, fallback_response: {message: "x"}}
  - name: c
    deployments: [{provider: o}, {provider: a}]
    canary: {version: v2, percent: 1}
    outlier: {}
routes:
  - {name: r, match: {model: auto}, when: {}, limits: {}, timeouts: {}, target: m}
admin: {listen: {port: 9090}, token: "0123456789abcdef0123", tenant_tokens: [{name: tt, tenant: t1, sha256: "1111111111111111111111111111111111111111111111111111111111111111"}]}
healing: {rules: [{name: h, model: c, deployment: "*", when: {metric: error_rate, above: 50}, action: eject}]}
tenants: [{name: t1, limits: {}, model_limits: {m: {}}}]
keys: [{name: k1, sha256: "0000000000000000000000000000000000000000000000000000000000000000", tenant: t1, limits: {}}]
auth: {chains: [{name: ch, match: {}, links: [{type: api_key}]}]}
rate_limits: {models: {m: {}}, policies: [{name: p, match: {}, rules: [{client_type: ci, requests_per_minute: 10, rollout: {percent: 5}}]}]}
store: {}
idempotency: {}
discovery: {}
tracing: {endpoint: "http://127.0.0.1:9/v1/traces"}
usage: {spill_dir: /tmp/x, sinks: [{type: file, path: /tmp/x/u.jsonl}]}
files: {provider: o}
mcp: {access: [{allow: ["*"]}]}
plugins: [{id: pl, version: "1", source: "return {on_request = function(r) end}", budgets: {}, breaker: {}, kv: {}, http: {allow: [example.com], breaker: {}}}]
prompts: [{id: pr, version: "1", messages: [{role: user, content: hi}]}]
responses: {}
cache: {semantic: {}}
guardrails: {policies: [{name: gp, match: {}, rules: [{name: inj, action: block, injection: {}}, {name: mod, action: block, moderation: {url: "http://127.0.0.1:9/v1/moderations"}}, {name: q, action: flag, quality: {embedding_model: m}}]}]}
)";
constexpr const char* kEverySectionRedis = R"(listeners: [{port: 8080}]
providers:
  - {name: k, type: mock}
models:
  - name: m
    deployments: [{provider: k, dns: {name: "_http._tcp.x.example"}}]
healing: {rules: [{name: h, model: m, when: {metric: error_rate, above: 50}, action: scale, scale: {deployment: web, replicas: 3}}]}
store: {type: redis, lookups: {}, redis: {url: "redis://127.0.0.1:6379"}}
kubernetes: {}
region: {name: eu, peers: [{name: us, url: "redis://127.0.0.1:6380"}]}
cache: {redis: {url: "redis://127.0.0.1:6381"}}
usage: {spill_dir: /tmp/x, sinks: [{type: redis_stream}, {type: webhook, url: "http://127.0.0.1:9/r"}]}
)";

TEST(ConfigReference, TheReferencesDefaultsAreTheLoadersDefaults) {
  config_detail::FallbackCheck check;
  config_detail::fallbackCheck = &check;
  for (const char* yaml : {kEverySection, kEverySectionRedis}) {
    const auto r = loadConfigString(yaml, "every.yaml");
    EXPECT_TRUE(r.config) << r.error;
  }
  const auto example = loadConfigFile("config/tahua.example.yaml");
  EXPECT_TRUE(example.config) << example.error;
  config_detail::fallbackCheck = nullptr;
  std::string all;
  for (const auto& d : check.drift) all += "\n  " + d;
  EXPECT_TRUE(check.drift.empty()) << "defaults the reference states but the loader does not keep:" << all;
  // The comparison ran (a table default in words, such as "the route's", is skipped).
  EXPECT_GT(check.checked, 250u);
}

// The names a Choice field lists, split on " | ".
std::vector<std::string> choiceNames(const schema::Field& f) {
  std::vector<std::string> out;
  std::string_view rest = f.bound;
  while (!rest.empty()) {
    const auto bar = rest.find(" | ");
    out.emplace_back(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? std::string_view{} : rest.substr(bar + 3);
  }
  return out;
}

// A provider's `type` lists the vendors of src/providers/vendors.h, and each vendor's own
// fields are its table.
TEST(ConfigReference, ProviderTypesAreTheVendorKinds) {
  const schema::Table* providers = schema::findTable("providers[]");
  ASSERT_TRUE(providers);
  const schema::Field* type = providers->find("type");
  ASSERT_TRUE(type);
  std::vector<std::string> kinds;
  for (const ProviderKind* k : providerKinds()) {
    kinds.emplace_back(k->type);
    if (k->options.empty()) continue;
    const schema::Table* own = schema::findTable("providers[] (type: " + std::string(k->type) + ")");
    ASSERT_TRUE(own) << k->type;
    EXPECT_EQ(own->fields.data(), k->options.data()) << k->type;
  }
  EXPECT_EQ(choiceNames(*type), kinds);
}

TEST(ConfigReference, ResourceKindsAreTheStoredKinds) {
  const schema::Table* resource = schema::findTable("(resource)");
  ASSERT_TRUE(resource);
  ASSERT_TRUE(resource->find("kind"));
  for (const std::string& kind : choiceNames(*resource->find("kind"))) EXPECT_TRUE(storedResourceKind(kind)) << kind;
  EXPECT_FALSE(storedResourceKind("Gadget"));
}

}  // namespace config_reference_test
}  // namespace tahua
