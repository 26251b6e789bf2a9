#include "config/config.h"
#include "config/provider_kind.h"
#include "core/sha256.h"
#include "guardrails/rule_set.h"

#include <gtest/gtest.h>

#include "request/request_context.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tahua {
namespace config_loader_test {  // named, not anonymous: eight test files compile as one unit

std::string loadError(const std::string& yaml) {
  auto r = loadConfigString(yaml, "t.yaml");
  EXPECT_FALSE(r.config) << yaml;
  return r.error;
}

const char* kMinimal = R"(
listeners:
  - port: 0
providers:
  - name: up
    type: openai
    base_url: http://127.0.0.1:9/v1/
models:
  - name: m
    provider: up
)";


TEST(ConfigLoader, BuiltInDefaultIsValid) {
  auto r = loadConfigString(defaultConfigYaml(), "<built-in>");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->listeners.at(0).port, 8080);
  EXPECT_NE(r.config->findModel("mock-gpt"), nullptr);
  EXPECT_TRUE(r.config->anyProviderUsable());
}

TEST(ConfigLoader, MinimalConfigGetsDefaultsAndParsedUrl) {
  auto r = loadConfigString(kMinimal, "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  const auto& p = r.config->providers.at(0);
  EXPECT_EQ(p.host, "127.0.0.1");
  EXPECT_EQ(p.port, 9);
  EXPECT_EQ(p.base_path, "/v1");
  EXPECT_FALSE(p.https);
  EXPECT_EQ(p.timeouts.connect, Millis(5000));
  const ModelConfig* m = r.config->findModel("m");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->deployments.at(0).upstream_model, "m");
  EXPECT_EQ(r.config->server.max_body_bytes, 16u * 1024 * 1024);
}

TEST(ConfigLoader, UnknownFieldNamesFileLineAndField) {
  std::string yaml = std::string(kMinimal) + "servr:\n  workers: 1\n";
  EXPECT_EQ(loadError(yaml).rfind("t.yaml:11:1: servr: unknown field", 0), 0u) << loadError(yaml);
}

TEST(ConfigLoader, BadDurationNamesTheNestedField) {
  std::string yaml = R"(
listeners: [{port: 0}]
providers:
  - name: up
    type: openai
    base_url: http://h/v1
    timeouts:
      connect: 5 seconds
models: [{name: m, provider: up}]
)";
  std::string err = loadError(yaml);
  EXPECT_NE(err.find("t.yaml:8:16: providers[0].timeouts.connect: invalid duration \"5 seconds\""), std::string::npos)
      << err;
}

TEST(ConfigLoader, ModelWithUnknownProvider) {
  std::string err = loadError(R"(
listeners: [{port: 0}]
providers: [{name: up, type: mock}]
models:
  - name: m
    provider: nope
)");
  EXPECT_NE(err.find("t.yaml:6:15: models[0].provider: unknown provider \"nope\""), std::string::npos) << err;
}

TEST(ConfigLoader, YamlSyntaxErrorHasPosition) {
  std::string err = loadError("listeners: [\n  {port: 0\nproviders: x\n");
  EXPECT_EQ(err.rfind("t.yaml:", 0), 0u) << err;
  EXPECT_NE(err.find("(yaml)"), std::string::npos) << err;
}

TEST(ConfigLoader, ValidationErrors) {
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders: [{name: a, type: mock}]\n").find("models: required"),
            std::string::npos);
  EXPECT_NE(loadError("listeners: [{port: 70000}]\nproviders: [{name: a, type: mock}]\nmodels: [{name: m, provider: a}]\n")
                .find("listeners[0].port: must be between 0 and 65535"),
            std::string::npos);
  // Every reader takes up to 1,024 levels (core/json_read.h): the bound stays below it.
  EXPECT_NE(loadError("server: {max_json_depth: 1001}\nlisteners: [{port: 0}]\nproviders: [{name: a, type: mock}]\nmodels: [{name: m, provider: a}]\n")
                .find("server.max_json_depth: must be between 8 and 1000"),
            std::string::npos);
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders: [{name: a, type: grpc}]\nmodels: [{name: m, provider: a}]\n")
                .find("unknown provider type \"grpc\""),
            std::string::npos);
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders: [{name: a, type: openai, base_url: \"ftp://x\"}]\n"
                      "models: [{name: m, provider: a}]\n")
                .find("scheme must be http or https"),
            std::string::npos);
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders: [{name: a, type: openai, base_url: \"https://u:p@x\"}]\n"
                      "models: [{name: m, provider: a}]\n")
                .find("credentials in the URL are not allowed"),
            std::string::npos);
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders: [{name: a, type: mock}, {name: a, type: mock}]\n"
                      "models: [{name: m, provider: a}]\n")
                .find("duplicate provider name"),
            std::string::npos);
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders: [{name: a, type: mock}]\n"
                      "models: [{name: m, provider: a}, {name: m, provider: a}]\n")
                .find("duplicate model name"),
            std::string::npos);
  EXPECT_NE(loadError("").find("the file is empty"), std::string::npos);
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders: [{name: a, type: openai, base_url: \"http://10.0.0.1.example.com/v1\"}]\n"
                      "models: [{name: m, provider: a}]\n")
                .find("the host is neither a name nor an address"),
            std::string::npos);
}

TEST(ConfigLoader, McpServersAloneNeedNoModelsAndOriginsAreChecked) {
  const std::string mcp = "listeners: [{port: 0}]\nproviders: [{name: gh, type: mcp, base_url: \"http://127.0.0.1:9/mcp\"}]\n";
  auto r = loadConfigString(mcp, "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_TRUE(r.config->models.empty());
  EXPECT_EQ(r.config->mcp.targets.size(), 1u);
  r = loadConfigString(mcp + "mcp: {allowed_origins: [\"https://App.example.com:8443\", \"*\"]}\n", "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->mcp.allowed_origins, (std::vector<std::string>{"https://app.example.com:8443", "*"}));
  EXPECT_NE(loadError(mcp + "mcp: {allowed_origins: [\"https://app.example.com/path\"]}\n").find("t.yaml:3"), std::string::npos);
  EXPECT_NE(loadError(mcp + "mcp: {allowed_origins: [\"https://app.example.com/path\"]}\n").find("mcp.allowed_origins[0]"), std::string::npos);
  EXPECT_NE(loadError(mcp + "mcp: {allowed_origins: [\"ftp://x\"]}\n").find("is not an origin"), std::string::npos);
  EXPECT_NE(loadError(mcp + "mcp: {allowed_origins: \"*\"}\n").find("expected a list of origins"), std::string::npos);
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders: [{name: a, type: mock}]\nmodels: []\n").find("models: expected a non-empty list"),
            std::string::npos);
}

TEST(ConfigLoader, ApiKeyFromEnvAndUnsetEnvMakesProviderUnusable) {
  ::setenv("TAHUA_TEST_KEY", "sk-secret", 1);
  ::unsetenv("TAHUA_TEST_MISSING");
  auto r = loadConfigString(R"(
listeners: [{port: 0}]
providers:
  - {name: a, type: openai, base_url: "https://api.example.com/v1", api_key_env: TAHUA_TEST_KEY}
  - {name: b, type: openai, base_url: "https://api.example.com/v1", api_key_env: TAHUA_TEST_MISSING}
models: [{name: m, provider: a}]
)",
                            "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->providers[0].api_key, "sk-secret");
  EXPECT_TRUE(r.config->providers[0].usable);
  EXPECT_EQ(r.config->providers[0].port, 443);
  EXPECT_FALSE(r.config->providers[1].usable);
  ASSERT_EQ(r.warnings.size(), 2u);  // the unset variable, and authentication being off
  EXPECT_NE(r.warnings[0].find("TAHUA_TEST_MISSING"), std::string::npos);
  for (const auto& w : r.warnings) EXPECT_EQ(w.find("sk-secret"), std::string::npos);
}

// An openai provider's `apis`: the APIs its server serves itself, by name; the default
// lacks `responses` (translated to chat completions instead). Other types refuse the field.
TEST(ConfigLoader, OpenAIProviderApisList) {
  const std::string head = "listeners: [{port: 0}]\nproviders:\n  - {name: a, type: openai, base_url: \"http://127.0.0.1:9/v1\"";
  const std::string tail = "}\nmodels: [{name: m, provider: a}]\n";
  auto def = loadConfigString(head + tail, "t.yaml");
  ASSERT_TRUE(def.config) << def.error;
  EXPECT_EQ(def.config->providers[0].apis, kDefaultProviderApis);
  EXPECT_FALSE(def.config->providers[0].serves(ProviderApi::Responses));
  auto listed = loadConfigString(head + ", apis: [chat, responses, embeddings]" + tail, "t.yaml");
  ASSERT_TRUE(listed.config) << listed.error;
  const ProviderConfig& p = listed.config->providers[0];
  EXPECT_TRUE(p.serves(ProviderApi::Chat) && p.serves(ProviderApi::Responses) && p.serves(ProviderApi::Embeddings));
  EXPECT_FALSE(p.serves(ProviderApi::Completions) || p.serves(ProviderApi::Files) || p.serves(ProviderApi::Realtime));
  EXPECT_NE(loadError(head + ", apis: [chat, assistants]" + tail).find("providers[0].apis: unknown API \"assistants\""),
            std::string::npos);
  EXPECT_NE(loadError(head + ", apis: [chat, chat]" + tail).find("\"chat\" is listed twice"), std::string::npos);
  EXPECT_NE(loadError(head + ", apis: []" + tail).find("must name at least one API"), std::string::npos);
  EXPECT_NE(loadError(head + ", apis: chat" + tail).find("expected a list"), std::string::npos);
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders: [{name: a, type: anthropic, apis: [chat]}]\n"
                      "models: [{name: m, provider: a}]\n")
                .find("apis: not used by type anthropic"),
            std::string::npos);
}

TEST(ConfigLoader, RetryAndCircuitBreakerSections) {
  auto r = loadConfigString(R"(
listeners: [{port: 0}]
providers:
  - name: a
    type: openai
    base_url: http://h
    retry: {attempts: 3, on_status: [503], backoff: 50ms}
    circuit_breaker: {window: 10, min_calls: 5}
models: [{name: m, provider: a}]
)",
                            "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  const auto& p = r.config->providers[0];
  EXPECT_EQ(p.retry.attempts, 3);
  EXPECT_EQ(p.retry.on_status, std::vector<int>{503});
  EXPECT_EQ(p.retry.backoff, Millis(50));
  EXPECT_TRUE(p.circuit_breaker.enabled);  // a section turns it on
  EXPECT_EQ(p.circuit_breaker.failure_rate, 50);
  EXPECT_EQ(p.circuit_breaker.open_for, Millis(60000));
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders:\n  - {name: a, type: openai, base_url: \"http://h\", "
                      "circuit_breaker: {window: 5, min_calls: 6}}\nmodels: [{name: m, provider: a}]\n")
                .find("circuit_breaker.min_calls: must not exceed window"),
            std::string::npos);
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders:\n  - {name: a, type: openai, base_url: \"http://h\", "
                      "retry: {on_status: [200]}}\nmodels: [{name: m, provider: a}]\n")
                .find("retry.on_status[0]: must be between 400 and 599"),
            std::string::npos);
}

TEST(ConfigLoader, HeaderValuesCannotInjectLines) {
  EXPECT_NE(loadError("listeners: [{port: 0}]\nproviders:\n  - name: a\n    type: openai\n    base_url: http://h\n"
                      "    headers: {X-A: \"a\\r\\nEvil: 1\"}\nmodels: [{name: m, provider: a}]\n")
                .find("must not contain line breaks"),
            std::string::npos);
}

TEST(ConfigLoader, ExampleFileIsValid) {
  ::setenv("OPENAI_API_KEY", "sk-test", 1);
  auto r = loadConfigFile("config/tahua.example.yaml");
  EXPECT_TRUE(r.config) << r.error;
}

}  // namespace config_loader_test
}  // namespace tahua

namespace tahua {
namespace config_loader_test {

std::string withProvider(const std::string& provider_flow, const std::string& model_extra = "") {
  return "listeners: [{port: 0}]\nproviders: [" + provider_flow + "]\nmodels: [{name: m, provider: p" + model_extra + "}]\n";
}


TEST(ConfigLoader, VendorProvidersGetTheirDefaults) {
  auto r = loadConfigString(withProvider("{name: p, type: anthropic, api_key: k}"), "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  const auto& a = r.config->providers[0];
  EXPECT_EQ(a.type, "anthropic");
  ASSERT_NE(a.kind, nullptr);
  EXPECT_EQ(a.kind, findProviderKind("anthropic"));
  EXPECT_TRUE(a.https);
  EXPECT_EQ(a.host, "api.anthropic.com");
  EXPECT_EQ(a.base_path, "/v1");
  EXPECT_EQ(a.anthropic_version, "2023-06-01");
  EXPECT_EQ(a.default_max_tokens, 4096);

  r = loadConfigString(withProvider("{name: p, type: gemini, api_key: k}"), "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->providers[0].host, "generativelanguage.googleapis.com");
  EXPECT_EQ(r.config->providers[0].base_path, "/v1beta");

  r = loadConfigString(
      withProvider("{name: p, type: bedrock, aws: {region: eu-west-1, access_key_id: AKID, secret_access_key: SECRET}}"),
      "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->providers[0].host, "bedrock-runtime.eu-west-1.amazonaws.com");
  EXPECT_EQ(r.config->providers[0].aws.secret_access_key, "SECRET");
  EXPECT_TRUE(r.config->providers[0].usable);

  r = loadConfigString(
      withProvider("{name: p, type: azure-openai, base_url: \"https://r.openai.azure.com/openai\", api_version: 2024-10-21, api_key: k}"),
      "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->providers[0].api_version, "2024-10-21");
}

TEST(ConfigLoader, VendorFieldsAreValidated) {
  EXPECT_NE(loadError(withProvider("{name: p, type: azure-openai, base_url: \"https://r/openai\", api_key: k}"))
                .find("providers[0].api_version: required for type azure-openai"),
            std::string::npos);
  EXPECT_NE(loadError(withProvider("{name: p, type: bedrock}")).find("providers[0].aws: required for type bedrock"),
            std::string::npos);
  EXPECT_NE(loadError(withProvider("{name: p, type: openai, base_url: \"http://x/v1\", anthropic_version: x}"))
                .find("providers[0].anthropic_version: not used by type openai"),
            std::string::npos);
  EXPECT_NE(loadError(withProvider("{name: p, type: bedrock, api_key: k, aws: {region: us-east-1, access_key_id: a, secret_access_key: b}}"))
                .find("bedrock uses aws credentials"),
            std::string::npos);
  EXPECT_NE(loadError(withProvider("{name: p, type: bedrock, aws: {region: \"us east\", access_key_id: a, secret_access_key: b}}"))
                .find("providers[0].aws.region: not an AWS region name"),
            std::string::npos);
  EXPECT_NE(loadError(withProvider("{name: p, type: mock}", ", pricing: {input: 1}"))
                .find("models[0].pricing: input and output prices"),
            std::string::npos);
  EXPECT_NE(loadError(withProvider("{name: p, type: mock}", ", pricing: {input: -1, output: 2}"))
                .find("models[0].pricing.input: expected a number from 0 to 1000000"),
            std::string::npos);
}

TEST(ConfigLoader, BedrockCredentialsFromTheEnvironment) {
  ::setenv("TAHUA_TEST_AK", "AKIDENV", 1);
  ::unsetenv("TAHUA_TEST_SK_UNSET");
  auto r = loadConfigString(
      withProvider("{name: p, type: bedrock, aws: {region: us-east-1, access_key_id_env: TAHUA_TEST_AK, "
                   "secret_access_key_env: TAHUA_TEST_SK_UNSET}}"),
      "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->providers[0].aws.access_key_id, "AKIDENV");
  EXPECT_FALSE(r.config->providers[0].usable);  // a missing secret: 503 until it is set
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings[0].find("TAHUA_TEST_SK_UNSET"), std::string::npos);
}

TEST(ConfigLoader, PricingPerImageAloneOrBesideTokenPrices) {
  auto alone = loadConfigString(withProvider("{name: p, type: mock}", ", pricing: {per_image: 0.04}"), "t.yaml");
  ASSERT_TRUE(alone.config) << alone.error;
  EXPECT_TRUE(alone.config->models[0].pricing.set);
  EXPECT_DOUBLE_EQ(alone.config->models[0].pricing.per_image, 0.04);
  EXPECT_DOUBLE_EQ(alone.config->models[0].pricing.input, 0);
  Usage u;
  u.images = 3;
  EXPECT_DOUBLE_EQ(costUsd(&alone.config->models[0], u), 0.12);
  u.images = -1;
  EXPECT_LT(costUsd(&alone.config->models[0], u), 0);  // nothing reported: unknown
  EXPECT_NE(loadError(withProvider("{name: p, type: mock}", ", pricing: {per_image: 0.04, input: 1}"))
                .find("models[0].pricing: input and output prices (USD per million tokens) go together"),
            std::string::npos);
}

TEST(ConfigLoader, PricingDefaultsCachedInputToInput) {
  auto r = loadConfigString(withProvider("{name: p, type: mock}", ", pricing: {input: 3, output: 15}"), "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  const Pricing& p = r.config->models[0].pricing;
  EXPECT_TRUE(p.set);
  EXPECT_DOUBLE_EQ(p.cached_input, 3);
}

// yaml-cpp accepts a repeated mapping key and lookups see the first: the loader refuses it
// at the second, naming file, line and the key, in block and flow style, at any depth.
TEST(ConfigLoader, DuplicateKeysAreRefusedWithFileLineAndKey) {
  const std::string block = R"(listeners:
  - port: 0
providers:
  - name: up
    type: openai
    base_url: http://127.0.0.1:9/v1/
    api_key: sk-first
    api_key: sk-second
models:
  - name: m
    provider: up
)";
  EXPECT_EQ(loadError(block),
            "t.yaml:8:5: providers[0].api_key: duplicate key \"api_key\" (first at line 7); a key may appear once in a "
            "mapping");
  std::string err = loadError("listeners: [{port: 0}]\nproviders: [{name: a, type: mock, name: b}]\n"
                              "models: [{name: m, provider: a}]\n");
  EXPECT_EQ(err.rfind("t.yaml:2:35: providers[0].name: duplicate key \"name\" (first at line 2)", 0), 0u) << err;
  // A whole section given twice: the second would have been ignored.
  err = loadError(std::string(kMinimal) + "models:\n  - name: other\n    provider: up\n");
  EXPECT_EQ(err.rfind("t.yaml:11:1: models: duplicate key \"models\" (first at line 8)", 0), 0u) << err;
  // Deep inside a route.
  err = loadError(std::string(kMinimal) + "routes:\n  - match: {model: auto, path: /a, path: /b}\n    target: m\n");
  EXPECT_EQ(err.rfind("t.yaml:12:36: routes[0].match.path: duplicate key \"path\" (first at line 12)", 0), 0u) << err;
  // The same key in different mappings is fine.
  EXPECT_TRUE(loadConfigString(kMinimal, "t.yaml").config);
}

TEST(ConfigLoader, DuplicateKeysInAConfigDirectoryNameTheFile) {
  char tmpl[] = "/tmp/tahua-dupkeys-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir(tmpl);
  std::ofstream(dir / "base.yaml") << kMinimal;
  std::ofstream(dir / "routes.yaml") << R"(apiVersion: tahua.dev/v1
kind: ModelRoute
metadata: {name: r}
spec:
  match: {model: auto}
  target: m
  target: up
)";
  auto r = loadConfigFile(dir.string());
  EXPECT_FALSE(r.config);
  EXPECT_EQ(r.error.rfind((dir / "routes.yaml").string() + ":7:3: spec.target: duplicate key \"target\" (first at line 6)", 0),
            0u)
      << r.error;
  // A plain document in the directory too.
  std::ofstream(dir / "routes.yaml") << "limits: {max_queue: 1, max_queue: 2}\n";
  r = loadConfigFile(dir.string());
  EXPECT_EQ(r.error.rfind((dir / "routes.yaml").string() + ":1:24: limits.max_queue: duplicate key \"max_queue\"", 0), 0u)
      << r.error;
  std::ofstream(dir / "routes.yaml") << "limits: {max_queue: 1}\n";
  r = loadConfigFile(dir.string());
  EXPECT_TRUE(r.config) << r.error;
  std::filesystem::remove_all(dir);
}

}  // namespace config_loader_test
}  // namespace tahua

namespace tahua {
namespace config_loader_test {

TEST(ConfigLoader, RedisClusterSection) {
  auto ok = loadConfigString(std::string(kMinimal) + R"(store:
  type: redis
  redis:
    url: redis://:pw@ignored:1
    cluster: {nodes: ["127.0.0.1:7000", "10.0.0.2:7001"]}
)", "t.yaml");
  ASSERT_TRUE(ok.config) << ok.error;
  EXPECT_EQ(ok.config->store.redis.cluster_nodes, (std::vector<std::string>{"127.0.0.1:7000", "10.0.0.2:7001"}));

  EXPECT_NE(loadError(std::string(kMinimal) + R"(store:
  type: redis
  redis:
    cluster: {nodes: ["127.0.0.1:7000"]}
    sentinel: {addresses: ["127.0.0.1:26379"], master: m}
)").find("store.redis.cluster: a Redis Cluster has no sentinels"), std::string::npos);
  EXPECT_NE(loadError(std::string(kMinimal) + R"(store:
  type: redis
  redis:
    cluster: {nodes: ["127.0.0.1:70000"]}
)").find("store.redis.cluster.nodes[0]: expected host:port"), std::string::npos);
  EXPECT_NE(loadError(std::string(kMinimal) + R"(store:
  type: redis
  redis:
    cluster: {nodes: ["127.0.0.1:7000"]}
    url: redis://127.0.0.1:7000/3
)").find("store.redis.url: a Redis Cluster has only database 0"), std::string::npos);
  EXPECT_NE(loadError(std::string(kMinimal) + R"(store:
  type: redis
  redis: {url: "redis://h:1/x"}
)").find("store.redis.url: the path must be a database number"), std::string::npos);
}

}  // namespace config_loader_test
}  // namespace tahua

namespace tahua {
namespace config_loader_test {

TEST(ConfigLoader, CompanyWideBudgetsAreAcceptedAndTheBoundIsNamed) {
  auto ok = loadConfigString(std::string(kMinimal) + R"(tenants:
  - {name: company, limits: {usd_per_month: 1000000000, usd_per_day: 50000000}}
)", "t.yaml");
  ASSERT_TRUE(ok.config) << ok.error;
  EXPECT_EQ(ok.config->tenants[0].limits.usd_per_month, 1e9);
  EXPECT_NE(loadError(std::string(kMinimal) + R"(tenants:
  - {name: company, limits: {usd_per_month: 1e13}}
)").find("tenants[0].limits.usd_per_month: expected a number from 0 to 1000000000000 (USD)"), std::string::npos);
}

TEST(ConfigLoader, TracingAndUsageSections) {
  auto ok = loadConfigString(std::string(kMinimal) + R"(tracing: {endpoint: "http://127.0.0.1:4318/v1/traces", sample_ratio: 0.25}
usage:
  spill_dir: /tmp/spill
  sinks:
    - {type: file, path: /tmp/usage.jsonl, rotate_interval: 1h}
    - {name: billing, type: webhook, url: "https://billing.example/hook", headers: {authorization: "Bearer x"}}
    - {name: stream, type: redis_stream, url: "redis://127.0.0.1:6379"}
access_log: {sample_success: 0.5}
)", "t.yaml");
  ASSERT_TRUE(ok.config) << ok.error;
  EXPECT_TRUE(ok.config->tracing.enabled);
  EXPECT_EQ(ok.config->tracing.sample_ratio, 0.25);
  EXPECT_EQ(ok.config->tracing.protocol, TracingConfig::Protocol::Protobuf) << "what collectors expect";
  auto json = loadConfigString(std::string(kMinimal) + "tracing: {endpoint: \"http://h:4318/v1/traces\", protocol: json}\n", "t.yaml");
  ASSERT_TRUE(json.config) << json.error;
  EXPECT_EQ(json.config->tracing.protocol, TracingConfig::Protocol::Json);
  ASSERT_EQ(ok.config->usage.sinks.size(), 3u);
  EXPECT_EQ(ok.config->usage.sinks[0].name, "file");
  EXPECT_EQ(ok.config->usage.sinks[1].headers[0].first, "authorization");
  EXPECT_EQ(ok.config->access_log.sample_success, 0.5);
  for (auto [yaml, error] : std::vector<std::pair<std::string, std::string>>{
           {"tracing: {endpoint: \"grpc://x:4317\"}", "tracing.endpoint: only http:// and https:// are supported"},
           {"tracing: {endpoint: \"http://x/\", sample_ratio: 2}", "tracing.sample_ratio: expected a number from 0 to 1"},
           {"tracing: {enabled: true}", "tracing.endpoint: required"},
           {"tracing: {endpoint: \"http://x/\", protocol: grpc}", "tracing.protocol: expected one of protobuf | json"},
           {"usage: {sinks: [{type: file, path: x}]}", "usage.spill_dir: required"},
           {"usage: {spill_dir: d, sinks: [{type: file, path: x}, {type: file, path: y}]}", "usage.sinks[1].name: another sink"},
           {"usage: {spill_dir: d, sinks: [{type: file, path: x, url: \"http://h/\"}]}", "usage.sinks[0].url: not a setting of a file sink"},
           {"usage: {spill_dir: d, sinks: [{name: \"../x\", type: file, path: x}]}", "usage.sinks[0].name: letters, digits"},
           {"usage: {spill_dir: d, sinks: [{type: webhook, url: \"http://h/\", headers: {\"a b\": c}}]}",
            "usage.sinks[0].headers: invalid header name"},
       })
    EXPECT_NE(loadError(std::string(kMinimal) + yaml + "\n").find(error), std::string::npos) << yaml << " -> " << loadError(std::string(kMinimal) + yaml + "\n");
}

TEST(StoredResources, FileFirstThenStoreInIdOrderInvalidOnesSkipped) {
  auto base = loadConfigString(std::string(kMinimal) + R"(routes:
  - {name: fixed, match: {model: pinned}, target: m}
)", "t.yaml");
  ASSERT_TRUE(base.config) << base.error;
  const std::vector<StoredResource> stored = {
      {"ModelRoute/zeta", R"({"match":{"model":"z"},"target":"m"})"},
      {"ModelRoute/alpha", R"({"match":{"model":"a"},"target":"m"})"},
      {"ModelRoute/fixed", R"({"match":{"model":"pinned"},"target":"m"})"},         // the file's name
      {"ModelRoute/broken", R"({"match":{"model":"b"},"target":"nope"})"},          // unknown model
      {"RateLimitPolicy/p", R"({"per":"all","requests_per_minute":5})"},
      {"Gadget/x", R"({})"},                                                         // unknown kind
      {"ModelRoute/dup", R"({"target":"m","target":"m"})"},                           // a key twice
  };
  auto r = applyStoredResources(base.config, stored);
  ASSERT_TRUE(r.config);
  std::vector<std::string> names;
  for (const auto& route : r.config->routes) names.push_back(route.name);
  EXPECT_EQ(names, (std::vector<std::string>{"fixed", "alpha", "zeta"}));
  EXPECT_EQ(r.config->routes[0].models, (std::vector<std::string>{"pinned"}));  // the file's own
  ASSERT_EQ(r.config->rate_limits.policies.size(), 1u);
  EXPECT_EQ(r.config->rate_limits.policies[0].name, "p");
  std::vector<std::string> rejected;
  for (const auto& [id, e] : r.rejected) rejected.push_back(id + " | " + e);
  ASSERT_EQ(rejected.size(), 3u);
  // In id order: "Gadget/x" < "ModelRoute/broken" < "ModelRoute/dup".
  EXPECT_NE(rejected[0].find("Gadget/x | store resource Gadget/x: expected Kind/name"), std::string::npos) << rejected[0];
  EXPECT_NE(rejected[1].find("ModelRoute/broken | store resource ModelRoute/broken"), std::string::npos) << rejected[1];
  EXPECT_NE(rejected[1].find("ModelRoute/broken.spec.target: unknown model \"nope\""), std::string::npos) << rejected[1];
  EXPECT_NE(rejected[2].find("duplicate key \"target\""), std::string::npos) << rejected[2];
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("ModelRoute/fixed is not applied: the config file declares"), std::string::npos);
  // Nothing stored: the base itself.
  EXPECT_EQ(applyStoredResources(base.config, {}).config, base.config);
}

}  // namespace config_loader_test
}  // namespace tahua

namespace tahua {
namespace config_loader_test {

TEST(PromptTemplates, VersionsOrderNumericallyAndLatestIsTheGreatest) {
  EXPECT_TRUE(promptVersionLess("9", "10"));
  EXPECT_FALSE(promptVersionLess("10", "9"));
  EXPECT_TRUE(promptVersionLess("1.2", "1.3"));  // not numbers: by text
  const std::string yaml = std::string(kMinimal) + R"(
prompts:
  - {id: t, version: "9", messages: [{role: user, content: "nine"}]}
  - {id: t, version: "10", messages: [{role: user, content: "ten {{x}}"}], variables: {x: {type: integer, default: 3}}}
)";
  auto r = loadConfigString(yaml, "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  const PromptTemplateConfig* latest = r.config->findPrompt("t", "");
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->label, "t@10");
  EXPECT_EQ(r.config->findPrompt("t", "latest"), latest);
  EXPECT_EQ(r.config->findPrompt("t", "9")->label, "t@9");
  EXPECT_EQ(r.config->findPrompt("t", "11"), nullptr);
  ASSERT_EQ(latest->messages[0].content.size(), 2u);  // "ten " and {{x}}
  EXPECT_EQ(latest->messages[0].content[1].variable, 0);
  EXPECT_EQ(latest->variables[0].default_json, "3");
  EXPECT_FALSE(latest->variables[0].required);
}

TEST(PromptTemplates, ErrorsNameTheFieldAndTheProblem) {
  auto err = [](const std::string& prompts) { return loadError(std::string(kMinimal) + "prompts:\n" + prompts); };
  EXPECT_NE(err("  - {id: t, messages: [{role: user, content: \"hi {{who}}\"}]}").find("prompts[0].messages[0].content: {{who}} names no declared variable"), std::string::npos);
  EXPECT_NE(err("  - {id: t, messages: [{role: user, content: \"hi {{who\"}], variables: [who]}").find("is not closed"), std::string::npos);
  EXPECT_NE(err("  - {id: t, messages: [{role: robot, content: hi}]}").find("prompts[0].messages[0].role: expected system, developer, user or assistant"), std::string::npos);
  EXPECT_NE(err("  - {id: t, version: latest, messages: [{role: user, content: hi}]}").find("not a version"), std::string::npos);
  EXPECT_NE(err("  - {id: t, messages: [{role: user, content: hi}], variables: {n: {type: integer, default: abc}}}").find("prompts[0].variables.n.default: expected an integer"), std::string::npos);
  EXPECT_NE(err("  - {id: t, messages: [{role: user, content: hi}]}\n  - {id: t, messages: [{role: user, content: hi}]}").find("prompt t@1 is declared twice"), std::string::npos);
  EXPECT_NE(err("  - {id: t, parameters: {messages: x}, messages: [{role: user, content: hi}]}").find("prompts[0].parameters.messages: not a parameter"), std::string::npos);
}

}  // namespace config_loader_test
}  // namespace tahua

namespace tahua {
namespace config_loader_test {

TEST(ConfigLoader, CacheAndResponsesSectionsNameTheirBadFields) {
  const std::string base = R"(
listeners: [{port: 0}]
providers:
  - {name: up, type: openai, base_url: http://h/v1}
  - {name: anth, type: anthropic, base_url: http://h/v1, api_key: k}
)";
  EXPECT_NE(loadError(base + "models: [{name: m, provider: up}]\ncache: {scope: team}\n").find("cache.scope: expected tenant or key"),
            std::string::npos);
  EXPECT_NE(loadError(base + "models: [{name: m, provider: up}]\ncache: {cacheable: sometimes}\n").find("cache.cacheable"),
            std::string::npos);
  EXPECT_NE(loadError(base + "models: [{name: m, provider: up}]\nresponses: {scope: everyone}\n").find("responses.scope"),
            std::string::npos);
  EXPECT_NE(loadError(base + "models: [{name: m, provider: up}]\nresponses: {ttl: forever}\n").find("responses.ttl"), std::string::npos);
  // The semantic layer: its embedding model must exist, and be an openai, azure-openai or mock provider's.
  EXPECT_NE(loadError(base + "models: [{name: m, provider: up, cache: {enabled: true, semantic: {enabled: true}}}]\n")
                .find("embedding_model: required"),
            std::string::npos);
  EXPECT_NE(loadError(base + "models: [{name: m, provider: up, cache: {enabled: true, semantic: {enabled: true, embedding_model: e}}}]\n")
                .find("models[0].cache.semantic.embedding_model: unknown model \"e\""),
            std::string::npos);
  EXPECT_NE(loadError(base + "models:\n  - {name: m, provider: up, cache: {enabled: true, semantic: {enabled: true, embedding_model: e}}}\n"
                             "  - {name: e, provider: anth}\n")
                .find("must be served by an openai, azure-openai or mock provider"),
            std::string::npos);
  // A model's semantic section takes only its own keys (the bounds are cache-wide).
  EXPECT_NE(loadError(base + "models: [{name: m, provider: up, cache: {semantic: {max_entries: 5}}}]\n").find("max_entries: unknown field"),
            std::string::npos);
  auto ok = loadConfigString(base + "models: [{name: m, provider: up, cache: {enabled: true, ttl: 2d, stale_if_error: 1h}}]\n"
                                    "cache: {local_ttl: 0s, semantic: {max_entries: 10, max_entries_per_tenant: 5}}\nresponses: {ttl: 30d, scope: key}\n",
                             "t.yaml");
  ASSERT_TRUE(ok.config) << ok.error;
  EXPECT_EQ(ok.config->models[0].cache.ttl, Millis(2 * 86'400'000LL));
  EXPECT_EQ(ok.config->models[0].cache.stale_if_error, Millis(3'600'000));
  EXPECT_EQ(ok.config->cache.local_ttl, Millis(0));
  EXPECT_EQ(ok.config->cache.semantic_max_entries_per_tenant, 5u);
  EXPECT_TRUE(ok.config->responses.per_key);
}

}  // namespace config_loader_test
}  // namespace tahua

namespace tahua {
namespace config_loader_test {

// `guardrails:`: every mistake names the file, line and field; a pattern the matcher
// refuses names its rule.
TEST(ConfigLoader, ReadinessRequiresKnownModels) {
  auto ok = loadConfigString(std::string(kMinimal) + "server: {readiness: {require_models: [m]}}\n", "t.yaml");
  ASSERT_TRUE(ok.config) << ok.error;
  EXPECT_EQ(ok.config->server.ready_models, std::vector<std::string>{"m"});
  EXPECT_NE(loadError(std::string(kMinimal) + "server: {readiness: {require_models: [m, nope]}}\n")
                .find("server.readiness.require_models[1]: unknown model \"nope\""),
            std::string::npos);
  EXPECT_NE(loadError(std::string(kMinimal) + "server: {readiness: {models: [m]}}\n").find("server.readiness.models: unknown field"),
            std::string::npos);
}

TEST(ConfigLoader, GuardrailPolicyErrorsNameTheField) {
  const std::string base = std::string(kMinimal) + "guardrails:\n  policies:\n";
  const auto err = [&](const std::string& policies) { return loadError(base + policies); };
  EXPECT_NE(err("    - {name: p, rules: [{name: r, literals: [x]}]}\n").find("guardrails.policies[0].rules[0].action: required"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, literals: [x], pii: all, action: flag}]}\n").find("expected exactly one detector"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, pii: [ssn], action: flag}]}\n").find("rules[0].pii[0]: unknown kind"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, literals: [x], action: hide}]}\n").find("rules[0].action: expected block, redact or flag"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, literals: [x], action: flag, inspect: [answers]}]}\n").find("rules[0].inspect[0]"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, injection: true, action: block, inspect: [output]}]}\n")
                .find("an injection rule looks at the request"),
            std::string::npos);
  // Injection: a policy's threshold, allow list and explain.
  EXPECT_NE(err("    - {name: p, rules: [{name: r, injection: {allow: []}, action: block}]}\n").find("rules[0].injection.allow: expected a list"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, injection: {allow: [x, '']}, action: block}]}\n").find("rules[0].injection.allow[1]"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, injection: {explain: maybe}, action: block}]}\n").find("rules[0].injection.explain"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, injection: {allowed: [x]}, action: block}]}\n").find("rules[0].injection.allowed: unknown field"),
            std::string::npos);
  // Moderation of answers: text only; stream settings for rules on the output.
  EXPECT_NE(err("    - {name: p, rules: [{name: r, moderation: {url: 'http://m/v1/moderations'}, inspect: [output_tool_calls], action: block}]}\n")
                .find("rules[0].inspect: a moderation rule reads text"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, moderation: {url: 'http://m/v1/moderations', stream_mode: hold}, action: block}]}\n")
                .find("rules[0].moderation.stream_mode: for a rule that inspects output"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, moderation: {url: 'http://m/v1/moderations', stream_mode: later}, inspect: [output], action: block}]}\n")
                .find("rules[0].moderation.stream_mode: expected pass"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, moderation: {url: 'http://m/v1/moderations', stream_interval: 10}, inspect: [output], action: block}]}\n")
                .find("rules[0].moderation.stream_interval"),
            std::string::npos);
  {
    auto ok = loadConfigString(base + "    - {name: p, rules: [{name: r, injection: {threshold: 0.8, allow: ['Developer Ｍode'], explain: true}, action: block},\n"
                                      "        {name: o, moderation: {url: 'http://m/v1/moderations', stream_interval: 200, stream_mode: hold}, inspect: [input, output], action: block}]}\n",
                               "t.yaml");
    ASSERT_TRUE(ok.config) << ok.error;
    const auto& rules = ok.config->guardrails.policies[0].rules->rules();
    EXPECT_EQ(rules[0].allow, std::vector<std::string>{"developer mode"}) << "folded and lower-cased";
    EXPECT_TRUE(rules[0].explain);
    EXPECT_EQ(rules[1].moderation.stream_interval, 200u);
    EXPECT_TRUE(rules[1].moderation.stream_hold);
  }
  EXPECT_NE(err("    - {name: p, rules: [{name: r, moderation: {url: 'ftp://x'}, action: block}]}\n").find("rules[0].moderation.url"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, moderation: {url: 'http://m/v1/moderations'}, action: redact}]}\n")
                .find("a moderation verdict is about a whole text"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, literals: [x], action: flag}, {name: r, literals: [y], action: flag}]}\n")
                .find("duplicate rule \"r\""),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: r, literals: [x], action: flag}]}\n    - {name: p, rules: [{name: s, literals: [y], action: flag}]}\n")
                .find("duplicate policy \"p\""),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, match: {team: [a]}, rules: [{name: r, literals: [x], action: flag}]}\n").find("match.team"),
            std::string::npos);
  // Quality rules: an embedding model of this gateway, whole answers only.
  EXPECT_NE(err("    - {name: p, rules: [{name: q, quality: {embedding_model: nope}, action: flag}]}\n")
                .find("rules[0].quality.embedding_model: unknown model \"nope\""),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: q, quality: {embedding_model: m}, action: redact}]}\n").find("a quality verdict is about a whole answer"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: q, quality: {embedding_model: m}, inspect: [output], action: flag}]}\n")
                .find("rules[0].inspect: not for a quality rule"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: q, quality: {embedding_model: m, threshold: 2}, action: flag}]}\n").find("quality.threshold"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: q, quality: {embedding_model: m, sample: -0.5}, action: flag}]}\n").find("quality.sample"),
            std::string::npos);
  EXPECT_NE(err("    - {name: p, rules: [{name: q, quality: {embedding: m}, action: flag}]}\n").find("quality.embedding: unknown field"),
            std::string::npos);
  {
    auto q = loadConfigString(base + "    - {name: p, rules: [{name: q, quality: {embedding_model: m, threshold: 0.4, sample: 0.25, timeout: 3s}, action: block}]}\n",
                              "t.yaml");
    ASSERT_TRUE(q.config) << q.error;
    const auto& rule = q.config->guardrails.policies[0].rules->rules()[0];
    EXPECT_EQ(rule.quality.embedding_model, "m");
    EXPECT_DOUBLE_EQ(rule.quality.threshold, 0.4);
    EXPECT_DOUBLE_EQ(rule.quality.sample, 0.25);
    EXPECT_EQ(rule.quality.timeout_ms, 3000);
    EXPECT_EQ(rule.targets, 0);
  }
  // A pattern Hyperscan (or RE2) refuses: the rule's line and name.
  const std::string bad = err("    - name: p\n      rules:\n        - {name: ok, literals: [x], action: flag}\n"
                              "        - {name: broken, patterns: ['(unclosed'], action: flag}\n");
  EXPECT_NE(bad.find("t.yaml:"), std::string::npos) << bad;
  EXPECT_NE(bad.find("rules[1]"), std::string::npos) << bad;
  EXPECT_NE(bad.find("rule \"broken\" patterns[0]"), std::string::npos) << bad;
  // A valid policy loads, compiled.
  auto ok = loadConfigString(base + "    - {name: p, match: {model: m}, rules: [{name: r, pii: all, action: redact, mask: '[X]'}]}\n", "t.yaml");
  ASSERT_TRUE(ok.config) << ok.error;
  ASSERT_EQ(ok.config->guardrails.policies.size(), 1u);
  EXPECT_TRUE(ok.config->guardrails.policies[0].rules);
  EXPECT_EQ(ok.config->guardrails.policies[0].models, std::vector<std::string>{"m"});
  EXPECT_FALSE(ok.config->guardrails.policies[0].fingerprint.empty());
}

}  // namespace config_loader_test
}  // namespace tahua

namespace tahua {
namespace config_loader_test {

TEST(ConfigLoader, FilesSectionRoutesByProviderAndTenantAndChecksThem) {
  std::string yaml = std::string(kMinimal) + R"(  - name: other-model
    provider: other
  - name: c
    provider: claude
files:
  provider: up
  tenants: {team-b: other}
  ttl: 7d
server:
  uploads:
    max_bytes: {/v1/audio/transcriptions: 2048, default: 4096}
)";
  yaml.replace(yaml.find("models:"), 7, R"(  - name: other
    type: openai
    base_url: http://127.0.0.1:10/v1
  - name: claude
    type: anthropic
    api_key: x
models:)");
  auto r = loadConfigString(yaml, "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  const FilesConfig& f = r.config->files;
  ASSERT_EQ(f.targets.size(), 2u);
  EXPECT_EQ(f.targetFor("team-a")->deployments.at(0).provider, "up");
  EXPECT_EQ(f.targetFor("team-b")->deployments.at(0).provider, "other");
  EXPECT_EQ(f.ttl, Millis(7LL * 24 * 3600 * 1000));
  // The targets' deployments have state slots after every model's.
  EXPECT_EQ(r.config->deployment_count, 5u);
  EXPECT_EQ(f.targets[1].deployments[0].index, 4u);
  EXPECT_EQ(r.config->server.uploads.limitFor("/v1/audio/transcriptions"), 2048u);
  EXPECT_EQ(r.config->server.uploads.limitFor("/v1/images/edits"), 4096u);
  EXPECT_EQ(r.config->server.uploads.limitFor("/v1/files"), 512ull << 20);

  std::string bad = yaml;
  bad.replace(bad.find("provider: up\n  tenants"), 12, "provider: claude");
  EXPECT_NE(loadError(bad).find("files.provider: provider \"claude\" is of type anthropic"), std::string::npos) << loadError(bad);
  bad = yaml;
  bad.replace(bad.find("provider: up\n  tenants"), 12, "provider: nope");
  EXPECT_NE(loadError(bad).find("files.provider: unknown provider \"nope\""), std::string::npos) << loadError(bad);
  bad = yaml;
  bad.replace(bad.find("/v1/audio/transcriptions: 2048"), 30, "/v1/chat/completions: 2048");
  EXPECT_NE(loadError(bad).find("is not an upload path"), std::string::npos) << loadError(bad);
}

}  // namespace config_loader_test
}  // namespace tahua

namespace tahua {
namespace config_loader_test {

// admin.tokens: named global tokens, by SHA-256 or from an environment variable (kept as
// its SHA-256 only); names unique across admin.token ("admin") and every token list.
TEST(ConfigAdminTokens, NamedGlobalTokensBySha256OrEnvironment) {
  ::setenv("TAHUA_UNIT_ADMIN_TOKEN_B", "a-token-from-the-environment", 1);
  const std::string yaml = std::string(kMinimal) + R"(
admin:
  listen: {port: 9090}
  tokens:
    - {name: alice, sha256: "2222222222222222222222222222222222222222222222222222222222222222"}
    - {name: bob, token_env: TAHUA_UNIT_ADMIN_TOKEN_B}
    - {name: carol, token_env: TAHUA_UNIT_ADMIN_TOKEN_UNSET}
  audit_entries: 500
)";
  auto r = loadConfigString(yaml, "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  const AdminConfig& a = r.config->admin;
  EXPECT_TRUE(a.enabled) << "tokens alone enable the admin API";
  EXPECT_TRUE(a.token.empty());
  ASSERT_EQ(a.tokens.size(), 2u) << "an unset variable leaves its token off";
  EXPECT_EQ(a.tokens[0].name, "alice");
  EXPECT_EQ(a.tokens[0].sha256[0], 0x22);
  EXPECT_EQ(a.tokens[1].name, "bob");
  EXPECT_EQ(a.tokens[1].sha256, sha256("a-token-from-the-environment"));
  EXPECT_EQ(a.audit_entries, 500u);
  bool warned = false;
  for (const auto& w : r.warnings) warned = warned || w.find("TAHUA_UNIT_ADMIN_TOKEN_UNSET") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(ConfigAdminTokens, RefusesAmbiguousOrTakenNames) {
  const std::string head = std::string(kMinimal) + "tenants: [{name: t1}]\nadmin:\n  listen: {port: 9090}\n  token: \"0123456789abcdef0123\"\n";
  const std::string h = "\"3333333333333333333333333333333333333333333333333333333333333333\"";
  EXPECT_NE(loadError(head + "  tokens: [{name: x}]\n").find("set sha256 or token_env"), std::string::npos);
  EXPECT_NE(loadError(head + "  tokens: [{name: x, sha256: " + h + ", token_env: X}]\n").find("set sha256 or token_env"), std::string::npos);
  EXPECT_NE(loadError(head + "  tokens: [{name: admin, sha256: " + h + "}]\n").find("names admin.token"), std::string::npos);
  EXPECT_NE(loadError(head + "  tokens: [{name: x, sha256: " + h + "}, {name: x, sha256: " + h + "}]\n").find("duplicate name"),
            std::string::npos);
  EXPECT_NE(loadError(head + "  tokens: [{name: x, sha256: " + h + "}]\n  tenant_tokens: [{name: x, tenant: t1, sha256: " + h + "}]\n")
                .find("names an admin.tokens entry"),
            std::string::npos);
  EXPECT_NE(loadError(head + "  audit_entries: 5\n").find("audit_entries"), std::string::npos);
  EXPECT_NE(loadError(std::string(kMinimal) + "admin:\n  listen: {port: 9090}\n").find("needs a token"), std::string::npos);
}

}  // namespace config_loader_test
}  // namespace tahua
