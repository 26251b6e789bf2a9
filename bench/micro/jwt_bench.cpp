// Micro-benchmarks of the jwt auth link, one request's headers phase per iteration
// through the auth filter (a FilterChain without sockets), next to the API-key check in
// the same run: a token already verified (the per-worker cache), and a token seen for
// the first time with each algorithm (parse, signature, claims, tenant and subject,
// cache insert). Keys are made here and installed as the issuer's set (no fetch).
// Figures: docs/benchmarks.md, "JWT sign-in".
#include <benchmark/benchmark.h>

#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "../../tests/unit/jwt_test_keys.h"
#include "config/config.h"
#include "core/sha256.h"
#include "filters/auth/auth_filter.h"
#include "filters/auth/jwt_link.h"
#include "filters/filter.h"
#include "identity/issuer_keys.h"
#include "telemetry/metrics.h"
#include "tenants/tenant_directory.h"

namespace {

using namespace tahua;
namespace bj = boost::json;

constexpr const char* kKey = "tk-bench-0123456789abcdef";
constexpr const char* kIssuer = "https://idp.bench.example";

class Headers final : public HeaderView {
 public:
  std::string_view get(std::string_view name) const override { return name == "authorization" ? value : std::string_view{}; }
  std::string value;
};

struct World {
  // `jwt`: the chain is [jwt] with a cache of `cache_entries`; else the key check alone.
  World(bool jwt, int cache_entries, std::vector<const jwt::Signer*> signers = {}) {
    std::string yaml = "listeners: [{port: 0}]\nproviders: [{name: mock, type: mock}]\nmodels: [{name: bench, provider: mock}]\n";
    yaml += "tenants: [{name: bench}]\n";
    yaml += "keys: [{name: k, tenant: bench, sha256: " + toHex(sha256(kKey)) + "}]\n";
    if (jwt)
      yaml += std::string("auth:\n  jwt_issuers: [{name: corp, issuer: \"") + kIssuer +
              "\", audience: tahua, tenant: bench, jwks_url: \"http://127.0.0.1:9/keys\", cache_entries: " +
              std::to_string(cache_entries) + "}]\n  chains: [{links: [jwt]}]\n";
    auto r = loadConfigString(yaml, "bench.yaml");
    if (!r.config) throw std::runtime_error(r.error);
    config = r.config;
    if (jwt) {
      std::vector<std::shared_ptr<const jwt::Key>> keys;
      for (const jwt::Signer* s : signers) {
        std::string error;
        keys.push_back(jwt::keyFromJwk(bj::value(s->jwk()), error));
      }
      jwt::issuerKeys(jwtIssuerIdentity(config->auth.jwt_issuers[0]))->install(jwt::KeySet::of(std::move(keys)));
    }
    std::vector<std::string> notes;
    dir = buildTenantDirectory(*config, {}, {}, notes);
    chain.add(makeAuthFilter(*config, dir, metrics));
    block.resize(chain.stateBytes() / sizeof(std::max_align_t) + 2);
  }
  void request(const std::string& bearer) {
    headers.value = bearer;
    RequestContext ctx;
    ctx.config = config;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.path = "/v1/chat/completions";
    ctx.headers = &headers;
    chain.begin(ctx, reinterpret_cast<std::byte*>(block.data()));
    std::size_t next = 0;
    if (chain.run(RequestPhase::Headers, ctx, next) != FilterStatus::Continue || !ctx.principal.tenant)
      throw std::runtime_error(ctx.error ? ctx.error->message : "not authenticated");
    chain.complete(ctx);
  }
  ConfigPtr config;
  TenantDirectoryPtr dir;
  WorkerMetrics metrics;
  FilterChain chain;
  Headers headers;
  std::vector<std::max_align_t> block;
};

std::string token(const jwt::Signer& s, int n) {
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  return "Bearer " + s.token(bj::object{{"iss", kIssuer}, {"aud", "tahua"}, {"sub", "user-" + std::to_string(n) + "@example.com"},
                                        {"exp", now + 3600}, {"iat", now}});
}

void BM_ApiKey(benchmark::State& state) {
  World w(false, 0);
  const std::string bearer = std::string("Bearer ") + kKey;
  for (auto _ : state) w.request(bearer);
}
BENCHMARK(BM_ApiKey);

void BM_JwtCached(benchmark::State& state) {
  static jwt::Signer rsa(jwt::Alg::RS256, "rsa-1");
  World w(true, 10'000, {&rsa});
  const std::string bearer = token(rsa, 0);
  w.request(bearer);  // verified once; every iteration is a cache hit
  for (auto _ : state) w.request(bearer);
}
BENCHMARK(BM_JwtCached);

// What the cached path mostly is: the SHA-256 of the token (a JWT is ~20x a key's length).
void BM_Sha256OfToken(benchmark::State& state) {
  static jwt::Signer rsa(jwt::Alg::RS256, "rsa-1");
  const std::string bearer = token(rsa, 0);
  state.SetLabel(std::to_string(bearer.size() - 7) + " bytes");
  for (auto _ : state) benchmark::DoNotOptimize(sha256(std::string_view(bearer).substr(7)));
}
BENCHMARK(BM_Sha256OfToken);

void BM_Sha256OfKey(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(sha256(kKey));
}
BENCHMARK(BM_Sha256OfKey);

// A cache of one entry and two tokens in turn: every request verifies its token.
void firstSight(benchmark::State& state, jwt::Alg alg) {
  jwt::Signer s(alg, "k-1");
  World w(true, 1, {&s});
  const std::string tokens[2] = {token(s, 1), token(s, 2)};
  std::size_t i = 0;
  for (auto _ : state) w.request(tokens[i++ & 1]);
}
void BM_JwtFirstSightRS256(benchmark::State& state) { firstSight(state, jwt::Alg::RS256); }
void BM_JwtFirstSightES256(benchmark::State& state) { firstSight(state, jwt::Alg::ES256); }
void BM_JwtFirstSightEdDSA(benchmark::State& state) { firstSight(state, jwt::Alg::EdDSA); }
BENCHMARK(BM_JwtFirstSightRS256);
BENCHMARK(BM_JwtFirstSightES256);
BENCHMARK(BM_JwtFirstSightEdDSA);

}  // namespace

BENCHMARK_MAIN();
