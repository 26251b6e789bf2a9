// Authentication and the rate-limit filter through a FilterChain, without sockets:
// keys by hash, chains, model access, and limits with their headers and calibration.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "config/config.h"
#include "core/sha256.h"
#include "filters/auth/auth_filter.h"
#include "filters/auth/auth_link.h"
#include "filters/filter.h"
#include "filters/rate_limit/rate_limit_filter.h"
#include "store/memory_store.h"
#include "tenants/tenant_directory.h"
#include "telemetry/metrics.h"

namespace tahua {
namespace auth_test {  // named, not anonymous: eight test files compile as one unit

class Headers final : public HeaderView {
 public:
  std::map<std::string, std::string> h;
  std::string_view get(std::string_view name) const override {
    auto it = h.find(std::string(name));
    return it == h.end() ? std::string_view{} : std::string_view(it->second);
  }
};

ConfigPtr load(const std::string& extra) {
  const std::string yaml = R"(
listeners: [{port: 0}]
providers: [{name: mock, type: mock}]
models:
  - {name: m1, provider: mock, pricing: {input: 1, output: 2}}
  - {name: m2, provider: mock}
)" + extra;
  auto r = loadConfigString(yaml, "t.yaml");
  EXPECT_TRUE(r.config) << r.error;
  return r.config;
}

std::string keys(const std::string& more = "") {
  return R"(
tenants:
  - {name: a, models: [m1, m2]}
  - {name: b, models: [m1]}
  - {name: internal}
keys:
  - {name: ka, tenant: a, sha256: )" +
         toHex(sha256("sk-a")) + R"(, models: [m2]}
  - {name: kb, tenant: b, sha256: )" +
         toHex(sha256("sk-b")) + R"(}
  - {name: old, tenant: a, sha256: )" +
         toHex(sha256("sk-old")) + R"(, expires_at: 2020-01-01}
)" + more;
}

TenantDirectoryPtr directory(const ConfigPtr& cfg) {
  std::vector<std::string> notes;
  return buildTenantDirectory(*cfg, {}, {}, notes);
}

struct Block {
  explicit Block(const FilterChain& chain) : storage(chain.stateBytes() / sizeof(std::max_align_t) + 2) {}
  std::byte* get() { return reinterpret_cast<std::byte*>(storage.data()); }
  std::vector<std::max_align_t> storage;
};

struct Call {
  RequestContext ctx;
  Headers headers;
  FilterStatus status = FilterStatus::Continue;
};

// Runs the headers phase of `chain` for a request carrying `headers`.
FilterStatus authenticate(FilterChain& chain, ConfigPtr cfg, Call& run, std::string path = "/v1/chat/completions") {
  static std::string stored_path;
  stored_path = std::move(path);
  run.ctx.config = cfg;
  run.ctx.endpoint = Endpoint::ChatCompletions;
  run.ctx.path = stored_path;
  run.ctx.headers = &run.headers;
  std::size_t next = 0;
  return chain.run(RequestPhase::Headers, run.ctx, next);
}

TEST(AuthFilter, KnownKeysPassUnknownMissingAndExpiredOnesGet401) {
  auto cfg = load(keys());
  ASSERT_TRUE(cfg->auth.enabled);
  WorkerMetrics metrics;
  FilterChain chain;
  chain.add(makeAuthFilter(*cfg, directory(cfg), metrics));
  Block block(chain);
  struct Case {
    const char* header;
    const char* value;
    FilterStatus want;
    const char* code;
    const char* tenant;
  } cases[] = {
      {"authorization", "Bearer sk-a", FilterStatus::Continue, "", "a"},
      {"authorization", "bearer  sk-b ", FilterStatus::Continue, "", "b"},
      {"x-api-key", "sk-b", FilterStatus::Continue, "", "b"},
      {"api-key", "sk-a", FilterStatus::Continue, "", "a"},
      {"authorization", "Bearer sk-c", FilterStatus::Stop, "invalid_api_key", ""},
      {"authorization", "Basic sk-a", FilterStatus::Stop, "missing_api_key", ""},
      {"authorization", "Bearer", FilterStatus::Stop, "missing_api_key", ""},
      {"x-other", "sk-a", FilterStatus::Stop, "missing_api_key", ""},
      {"authorization", "Bearer sk-old", FilterStatus::Stop, "invalid_api_key", ""},
  };
  for (const auto& c : cases) {
    Call run;
    run.headers.h[c.header] = c.value;
    chain.begin(run.ctx, block.get());
    EXPECT_EQ(authenticate(chain, cfg, run), c.want) << c.header << ": " << c.value;
    if (c.want == FilterStatus::Stop) {
      ASSERT_TRUE(run.ctx.error);
      EXPECT_EQ(run.ctx.error->code(), c.code);
      EXPECT_EQ(run.ctx.error->httpStatus(), 401);
      EXPECT_EQ(run.ctx.error->message.find("sk-"), std::string::npos) << "never echo a key";
      EXPECT_EQ(run.ctx.principal.tenant, nullptr);
    } else {
      ASSERT_TRUE(run.ctx.principal.tenant);
      EXPECT_EQ(run.ctx.principal.tenant->name, c.tenant);
    }
    chain.complete(run.ctx);
  }
  EXPECT_EQ(metrics.auth_failures["invalid_api_key"], 2u);
  EXPECT_EQ(metrics.auth_failures["missing_api_key"], 3u);
}

TEST(AuthFilter, AKeySeenBeforeIsRefusedOnceExpiredOrRevoked) {
  // The key table caches verified keys (tenants/key_cache.h): the second request with a
  // key is a cache hit, which must decide as the first did; a new directory (what a
  // revocation publishes) comes with a new chain and an empty cache.
  auto cfg = load(keys());
  WorkerMetrics metrics;
  FilterChain chain;
  chain.add(makeAuthFilter(*cfg, directory(cfg), metrics));
  Block block(chain);
  auto once = [&](FilterChain& c, Block& b, const char* key, const char* code) {
    Call run;
    run.headers.h["authorization"] = std::string("Bearer ") + key;
    c.begin(run.ctx, b.get());
    const FilterStatus s = authenticate(c, cfg, run);
    if (*code) {
      EXPECT_EQ(s, FilterStatus::Stop) << key;
      EXPECT_TRUE(run.ctx.error) << key;
      if (run.ctx.error) {
        EXPECT_EQ(run.ctx.error->code(), code) << key;
      }
    } else {
      EXPECT_EQ(s, FilterStatus::Continue) << key;
      EXPECT_TRUE(run.ctx.principal.key) << key;
      if (run.ctx.principal.key) {
        EXPECT_EQ(run.ctx.principal.key->sha256, sha256(key));
      }
    }
    c.complete(run.ctx);
  };
  for (int i = 0; i < 3; ++i) {
    once(chain, block, "sk-a", "");
    once(chain, block, "sk-b", "");
    once(chain, block, "sk-old", "invalid_api_key");  // expired: found, cached, refused every time
    once(chain, block, "sk-c", "invalid_api_key");
  }
  // ka revoked: the directory without it, and the worker's chain rebuilt from it.
  auto revoked = load(R"(
tenants:
  - {name: a, models: [m1, m2]}
  - {name: b, models: [m1]}
keys:
  - {name: kb, tenant: b, sha256: )" + toHex(sha256("sk-b")) + "}\n");
  FilterChain next;
  next.add(makeAuthFilter(*revoked, directory(revoked), metrics));
  Block next_block(next);
  for (int i = 0; i < 2; ++i) {
    once(next, next_block, "sk-a", "invalid_api_key");
    once(next, next_block, "sk-b", "");
  }
}

TEST(AuthFilter, TheErrorHasTheInboundApisShape) {
  Error e{ErrorKind::InvalidApiKey, "Invalid API key."};
  EXPECT_EQ(e.toAnthropicJson(), R"({"type":"error","error":{"type":"authentication_error","message":"Invalid API key."}})");
  EXPECT_NE(e.toJson().find(R"("code":"invalid_api_key")"), std::string::npos);
  EXPECT_EQ((Error{ErrorKind::ModelNotAllowed, "x"}).httpStatus(), 403);
  EXPECT_NE((Error{ErrorKind::ModelNotAllowed, "x"}).toAnthropicJson().find("permission_error"), std::string::npos);
  EXPECT_EQ(e.toJsonRpc(),
            R"({"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Invalid API key.","data":{"type":"invalid_request_error","code":"invalid_api_key","status":401}}})");
}

TEST(AuthFilter, ChainsMatchByPathAndHeaderAndAnonymousLinksNameATenant) {
  auto cfg = load(keys(R"(
auth:
  chains:
    - name: internal
      match: {path_prefix: /v1/embeddings, headers: {x-internal: "*"}}
      links: [api_key, {type: anonymous, tenant: internal}]
)"));
  WorkerMetrics metrics;
  FilterChain chain;
  chain.add(makeAuthFilter(*cfg, directory(cfg), metrics));
  Block block(chain);
  {
    Call run;  // the internal chain: no key is fine, it is the internal tenant's
    run.headers.h["x-internal"] = "1";
    chain.begin(run.ctx, block.get());
    EXPECT_EQ(authenticate(chain, cfg, run, "/v1/embeddings"), FilterStatus::Continue);
    ASSERT_TRUE(run.ctx.principal.tenant);
    EXPECT_EQ(run.ctx.principal.tenant->name, "internal");
    EXPECT_EQ(run.ctx.principal.key, nullptr);
    chain.complete(run.ctx);
  }
  {
    Call run;  // a key on the internal chain still counts as that key's
    run.headers.h["x-internal"] = "1";
    run.headers.h["x-api-key"] = "sk-b";
    chain.begin(run.ctx, block.get());
    EXPECT_EQ(authenticate(chain, cfg, run, "/v1/embeddings"), FilterStatus::Continue);
    EXPECT_EQ(run.ctx.principal.tenant->name, "b");
    chain.complete(run.ctx);
  }
  {
    Call run;  // another path: the default chain, which wants a key
    run.headers.h["x-internal"] = "1";
    chain.begin(run.ctx, block.get());
    EXPECT_EQ(authenticate(chain, cfg, run, "/v1/chat/completions"), FilterStatus::Stop);
    chain.complete(run.ctx);
  }
}

TEST(AuthFilter, ModelAccessFollowsTheKeyThenTheTenant) {
  auto cfg = load(keys());
  Principal p;
  p.tenant = &cfg->tenants[0];
  p.key = &cfg->keys[0];  // ka: m2 only, within tenant a's m1, m2
  EXPECT_TRUE(p.allows("m2"));
  EXPECT_FALSE(p.allows("m1"));
  p.tenant = &cfg->tenants[1];
  p.key = &cfg->keys[1];  // kb: no list, tenant b: m1
  EXPECT_TRUE(p.allows("m1"));
  EXPECT_FALSE(p.allows("m2"));
  EXPECT_TRUE(Principal{}.allows("m2"));  // auth off

  FilterChain chain;
  chain.add(makeModelAccessFilter());
  Block block(chain);
  RequestContext ctx;
  ctx.config = cfg;
  ctx.principal = p;
  ctx.model = cfg->findModel("m2");
  chain.begin(ctx, block.get());
  std::size_t next = 0;
  EXPECT_EQ(chain.run(RequestPhase::UpstreamSelect, ctx, next), FilterStatus::Stop);
  EXPECT_EQ(ctx.error->httpStatus(), 403);
  chain.complete(ctx);
}

TEST(AuthConfig, TenantsOrKeysTurnAuthOnAndTheDefaultStaysOpen) {
  EXPECT_FALSE(load("")->auth.enabled);
  EXPECT_TRUE(load("tenants: [{name: x}]\n")->auth.enabled);
  EXPECT_FALSE(load("tenants: [{name: x}]\nauth: {enabled: false}\n")->auth.enabled);
  auto r = loadConfigString(defaultConfigYaml(), "<built-in>");
  ASSERT_TRUE(r.config);
  bool warned = false;
  for (const auto& w : r.warnings) warned = warned || w.find("authentication is off") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(AuthConfig, ErrorsNameTheField) {
  auto error = [](const std::string& extra) {
    const std::string yaml = "listeners: [{port: 0}]\nproviders: [{name: mock, type: mock}]\nmodels: [{name: m1, provider: mock}]\n" + extra;
    auto r = loadConfigString(yaml, "t.yaml");
    EXPECT_FALSE(r.config);
    return r.error;
  };
  EXPECT_NE(error("tenants: [{name: a}]\nkeys: [{name: k, tenant: a, sha256: sk-live-123}]\n")
                .find("keys[0].sha256: expected the key's SHA-256 as 64 hex digits"),
            std::string::npos);
  EXPECT_NE(error("keys: [{name: k, tenant: nobody, sha256: " + std::string(64, 'a') + "}]\n").find("keys[0].tenant: unknown tenant"),
            std::string::npos);
  EXPECT_NE(error("tenants: [{name: a, models: [m9]}]\n").find("tenants[0].models[0]: unknown model \"m9\""), std::string::npos);
  EXPECT_NE(error("tenants: [{name: a, limits: {requests_per_hour: 3}}]\n").find("tenants[0].limits"), std::string::npos);
  EXPECT_NE(error("tenants: [{name: a}, {name: a}]\n").find("tenants[1].name: duplicate tenant"), std::string::npos);
  EXPECT_NE(error("tenants: [{name: \"a b\"}]\n").find("tenants[0].name: may only hold"), std::string::npos);
  EXPECT_NE(error("tenants: [{name: a, models: [m1]}]\nkeys: [{name: k, tenant: a, sha256: " + std::string(64, 'a') +
                  ", models: [m1], expires_at: 2027-02-30}]\n")
                .find("keys[0].expires_at"),
            std::string::npos);
  EXPECT_NE(error("tenants: [{name: a}]\nkeys: [{name: k, tenant: a, sha256: " + std::string(64, 'a') + "}, {name: j, tenant: a, sha256: " +
                  std::string(64, 'A') + "}]\n")
                .find("keys[1].sha256: the same key is declared twice"),
            std::string::npos);
  EXPECT_NE(error("auth: {chains: [{links: [{type: anonymous}]}]}\n").find("auth.chains[0].links[0].tenant: required"),
            std::string::npos);
  EXPECT_NE(error("rate_limits: {models: {m1: {tokens_per_minute: 0}}}\n").find("rate_limits.models.m1.tokens_per_minute"),
            std::string::npos);
}

// --- the rate-limit filter ---

struct LimitFixture {
  explicit LimitFixture(const std::string& extra) : cfg(load(keys(extra))), dir(directory(cfg)), store([this] { return now; }) {
    chain.add(makeAuthFilter(*cfg, dir, metrics));
    chain.add(makeRateLimitFilter(*cfg, dir, store, metrics));
    block = std::make_unique<Block>(chain);
  }
  // One request by `key` for `model`: its status after the request phases, and the
  // headers its answer would carry.
  FilterStatus request(const std::string& key, const std::string& model, std::int64_t max_tokens = 0,
                       std::size_t body_bytes = 400, Usage usage = {}, int status = 200) {
    run = std::make_unique<Call>();
    run->headers.h["authorization"] = "Bearer " + key;
    chain.begin(run->ctx, block->get());
    FilterStatus s = authenticate(chain, cfg, *run);
    if (s == FilterStatus::Continue) {
      run->ctx.model = cfg->findModel(model);
      run->ctx.facts.max_tokens = max_tokens;
      run->ctx.body.assign(body_bytes, ' ');
      std::size_t next = 0;
      s = chain.run(RequestPhase::UpstreamSelect, run->ctx, next);
    }
    headers.clear();
    run->ctx.response_headers = &headers;
    chain.responseHeaders(run->ctx);
    run->ctx.response_headers = nullptr;
    run->ctx.usage = usage;
    run->ctx.status = s == FilterStatus::Continue ? status : 429;
    if (s == FilterStatus::Stop) error = *run->ctx.error;
    chain.complete(run->ctx);
    return s;
  }
  std::string header(std::string_view name) const {
    for (const auto& [n, v] : headers)
      if (n == name) return std::string(v);
    return "";
  }
  std::int64_t remainingTokens(const std::string& counter, std::int64_t limit) {
    return store.peek(LimitCheck{counter, LimitSpec{LimitKind::Bucket, limit, 60'000}, 0}).remaining;
  }

  ConfigPtr cfg;
  TenantDirectoryPtr dir;
  std::int64_t now = 1'000'000'000'000;
  MemoryStore store;
  WorkerMetrics metrics;
  FilterChain chain;
  std::unique_ptr<Block> block;
  std::unique_ptr<Call> run;
  std::vector<std::pair<std::string_view, std::string_view>> headers;
  Error error;
};

TEST(RateLimitFilter, RequestsPerMinutePerKeyWithHeadersAnd429) {
  LimitFixture f("rate_limits: {models: {m2: {requests_per_minute: 100}}}\n");
  // Give key kb a limit of its own through a second config: keys(...) above has none.
  LimitFixture g(R"(
rate_limits: {models: {m1: {requests_per_minute: 2}}}
)");
  EXPECT_EQ(g.request("sk-b", "m1"), FilterStatus::Continue);
  EXPECT_EQ(g.header("x-ratelimit-limit-requests"), "2");
  EXPECT_EQ(g.header("x-ratelimit-remaining-requests"), "1");
  EXPECT_EQ(g.request("sk-b", "m1"), FilterStatus::Continue);
  EXPECT_EQ(g.header("x-ratelimit-remaining-requests"), "0");
  EXPECT_EQ(g.request("sk-b", "m1"), FilterStatus::Stop);
  EXPECT_EQ(g.error.kind, ErrorKind::RateLimited);
  EXPECT_EQ(g.error.code(), "rate_limit_exceeded");
  EXPECT_GE(g.error.retry_after_seconds, 1);
  EXPECT_NE(g.error.message.find("requests per minute (model limit): Limit 2"), std::string::npos) << g.error.message;
  EXPECT_EQ(g.header("x-ratelimit-remaining-requests"), "0");  // the refusal carries them too
  EXPECT_EQ(g.header("x-should-retry"), "");                   // a wait helps: SDKs may retry
  g.now += 120'000;                                           // two windows later
  EXPECT_EQ(g.request("sk-b", "m1"), FilterStatus::Continue);
  EXPECT_EQ((g.metrics.limit_rejections[{"model", "requests_per_minute"}]), 1u);
  // f: a limit on m2 does not touch m1.
  EXPECT_EQ(f.request("sk-b", "m1"), FilterStatus::Continue);
  EXPECT_EQ(f.header("x-ratelimit-limit-requests"), "");
}

TEST(RateLimitFilter, TokenLimitReservesTheEstimateAndCalibratesBothWays) {
  LimitFixture f(R"(
rate_limits: {models: {m1: {tokens_per_minute: 10000}}}
)");
  const std::string counter = "tahua:{m:m1}:model:tpm";
  // 400 body bytes ~ 100 prompt tokens + max_tokens 900 = 1,000 reserved; used 300.
  EXPECT_EQ(f.request("sk-b", "m1", 900, 400, Usage{.prompt_tokens = 100, .completion_tokens = 200}), FilterStatus::Continue);
  EXPECT_EQ(f.header("x-ratelimit-remaining-tokens"), "9000");  // at admission
  EXPECT_EQ(f.remainingTokens(counter, 10'000), 9'700);          // after calibration: refund 700
  // Used more than reserved (max_tokens absent: rate_limits.default_max_tokens = 1024).
  EXPECT_EQ(f.request("sk-b", "m1", 0, 400, Usage{.prompt_tokens = 2'000, .completion_tokens = 3'000}), FilterStatus::Continue);
  EXPECT_EQ(f.remainingTokens(counter, 10'000), 4'700);  // charged 5,000, not 1,124
  // A failed call (no answer, no usage) costs nothing.
  EXPECT_EQ(f.request("sk-b", "m1", 100, 400, Usage{}, 502), FilterStatus::Continue);
  EXPECT_EQ(f.remainingTokens(counter, 10'000), 4'700);
  // More than the whole bucket: refused for good, no Retry-After, SDKs told not to retry.
  EXPECT_EQ(f.request("sk-b", "m1", 20'000), FilterStatus::Stop);
  EXPECT_EQ(f.error.kind, ErrorKind::LimitTooSmall);
  EXPECT_EQ(f.error.retry_after_seconds, 0);
  EXPECT_NE(f.error.message.find("Limit 10000, Requested 20100"), std::string::npos) << f.error.message;
  EXPECT_EQ(f.header("x-should-retry"), "false");
  // Over what is left: a 429 that a wait cures.
  EXPECT_EQ(f.request("sk-b", "m1", 5'000), FilterStatus::Stop);
  EXPECT_EQ(f.error.kind, ErrorKind::RateLimited);
  EXPECT_GE(f.error.retry_after_seconds, 3);  // ~400 tokens short at 10,000 per minute
}

TEST(RateLimitFilter, BudgetsAndQuotasPerTenantKeyAndModelAllApply) {
  LimitFixture f(R"(
rate_limits: {models: {m1: {tokens_per_day: 1000000}}}
)");
  // Tenant b gets a money budget through a config of its own.
  auto cfg = load(R"(
tenants:
  - name: b
    limits: {usd_per_day: 0.01}
    model_limits: {m1: {tokens_per_month: 5000}}
keys:
  - {name: kb, tenant: b, sha256: )" + toHex(sha256("sk-b")) + R"(, limits: {requests_per_minute: 50}}
)");
  std::int64_t now = 1'000'000'000'000;
  MemoryStore store([&] { return now; });
  WorkerMetrics metrics;
  FilterChain chain;
  const TenantDirectoryPtr dir = directory(cfg);
  chain.add(makeAuthFilter(*cfg, dir, metrics));
  chain.add(makeRateLimitFilter(*cfg, dir, store, metrics));
  Block block(chain);
  auto go = [&](std::int64_t max_tokens, Usage usage) {
    Call run;
    run.headers.h["x-api-key"] = "sk-b";
    chain.begin(run.ctx, block.get());
    EXPECT_EQ(authenticate(chain, cfg, run), FilterStatus::Continue);
    run.ctx.model = cfg->findModel("m1");  // $1 / $2 per million tokens
    run.ctx.facts.max_tokens = max_tokens;
    run.ctx.body.assign(400, ' ');
    std::size_t next = 0;
    const FilterStatus s = chain.run(RequestPhase::UpstreamSelect, run.ctx, next);
    std::optional<Error> e = run.ctx.error;
    run.ctx.status = s == FilterStatus::Continue ? 200 : 429;
    run.ctx.usage = usage;
    chain.complete(run.ctx);
    return e;
  };
  // Reserve 100 + 2,000 tokens = $0.0041 of $0.01; used 100 + 1,000 = $0.0021.
  EXPECT_FALSE(go(2'000, Usage{.prompt_tokens = 100, .completion_tokens = 1'000}));
  EXPECT_FALSE(go(2'000, Usage{.prompt_tokens = 100, .completion_tokens = 1'000}));  // $0.0042 spent
  // $0.0042 + a $0.0061 reservation > $0.01: the budget refuses; it resets with the day.
  auto e = go(3'000, Usage{});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, ErrorKind::QuotaExceeded);
  EXPECT_EQ(e->code(), "insufficient_quota");
  EXPECT_NE(e->message.find("usd per day (tenant limit)"), std::string::npos) << e->message;
  EXPECT_GE(e->retry_after_seconds, 1);
  EXPECT_LE(e->retry_after_seconds, 86'400);
  // The tenant x model monthly token quota: 2,200 used of 5,000; 3,100 more do not fit.
  e = go(3'000, Usage{});
  ASSERT_TRUE(e);
  now += 86'400'000;  // next day: the budget is fresh, the month's quota is not
  e = go(3'000, Usage{});
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("tokens per month (tenant_model limit)"), std::string::npos) << e->message;
  EXPECT_FALSE(go(2'000, Usage{.prompt_tokens = 100, .completion_tokens = 100}));
  (void)f;
}

}  // namespace auth_test
}  // namespace tahua
