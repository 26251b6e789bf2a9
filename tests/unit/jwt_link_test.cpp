// The jwt link through the auth filter, without sockets or fetches (keys installed as
// the issuer's set): claims to tenant and subject, the per-worker cache following the
// issuer's keys (a dropped key ends its cached tokens), other credentials passing to
// the next link; and the config's checks of auth.jwt_issuers.
#include <gtest/gtest.h>

#include <ctime>
#include <map>
#include <memory>
#include <string>

#include "config/config.h"
#include "core/sha256.h"
#include "filters/auth/auth_filter.h"
#include "filters/auth/jwt_link.h"
#include "filters/filter.h"
#include "identity/issuer_keys.h"
#include "jwt_test_keys.h"
#include "telemetry/metrics.h"
#include "tenants/tenant_directory.h"

namespace tahua {
namespace jwt_link_test {  // named, not anonymous: eight test files compile as one unit
namespace bj = boost::json;

class JwtTestHeaders final : public HeaderView {
 public:
  std::string_view get(std::string_view name) const override { return name == "authorization" ? value : std::string_view{}; }
  std::string value;
};

const char* kIssuer = "https://idp.unit.example";

std::string baseYaml() {
  return std::string(R"(
listeners: [{port: 0}]
providers: [{name: mock, type: mock}]
models: [{name: m1, provider: mock}, {name: m2, provider: mock}]
tenants: [{name: eng}, {name: ops, models: [m1]}]
keys: [{name: k, tenant: eng, sha256: )") + toHex(sha256("tk-unit-key")) + "}]\n";
}

struct Gate {
  explicit Gate(const std::string& auth) {
    auto r = loadConfigString(baseYaml() + auth, "jwt.yaml");
    if (!r.config) throw std::runtime_error(r.error);
    config = r.config;
    std::vector<std::string> notes;
    dir = buildTenantDirectory(*config, {}, {}, notes);
    chain.add(makeAuthFilter(*config, dir, metrics));
    block.resize(chain.stateBytes() / sizeof(std::max_align_t) + 2);
  }
  std::shared_ptr<jwt::IssuerKeys> keys() { return jwt::issuerKeys(jwtIssuerIdentity(config->auth.jwt_issuers[0])); }
  // The request's principal, or the error's message.
  struct Outcome {
    bool ok = false;
    std::string tenant, subject, error;
  };
  Outcome call(const std::string& credential) {
    headers.value = "Bearer " + credential;
    RequestContext ctx;
    ctx.config = config;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.path = "/v1/chat/completions";
    ctx.headers = &headers;
    chain.begin(ctx, reinterpret_cast<std::byte*>(block.data()));
    std::size_t next = 0;
    Outcome o;
    o.ok = chain.run(RequestPhase::Headers, ctx, next) == FilterStatus::Continue;
    if (ctx.principal.tenant) o.tenant = ctx.principal.tenant->name;
    if (ctx.principal.caller) o.subject = ctx.principal.caller->subject;
    if (ctx.error) o.error = ctx.error->message;
    chain.complete(ctx);
    return o;
  }
  ConfigPtr config;
  TenantDirectoryPtr dir;
  WorkerMetrics metrics;
  FilterChain chain;
  JwtTestHeaders headers;
  std::vector<std::max_align_t> block;
};

std::string issuerYaml(const std::string& jwks_url, const std::string& links) {
  return std::string("auth:\n  jwt_issuers: [{name: corp, issuer: \"") + kIssuer + "\", audience: [tahua], jwks_url: \"" + jwks_url +
         "\", tenant_claim: team, tenants: {platform: eng, operations: ops}}]\n  chains: [{links: " + links + "}]\n";
}

bj::object claims(const std::string& sub, const std::string& team = "platform") {
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  return {{"iss", kIssuer}, {"aud", "tahua"}, {"sub", sub}, {"team", team}, {"exp", now + 600}};
}

std::shared_ptr<const jwt::KeySet> setOf(std::initializer_list<const jwt::Signer*> signers) {
  std::vector<std::shared_ptr<const jwt::Key>> keys;
  for (const jwt::Signer* s : signers) {
    std::string error;
    keys.push_back(jwt::keyFromJwk(bj::value(s->jwk()), error));
  }
  return jwt::KeySet::of(std::move(keys));
}

TEST(JwtLink, MapsClaimsToTenantAndSubjectAndLetsOtherCredentialsPass) {
  Gate g(issuerYaml("http://127.0.0.1:9/unit-1", "[jwt, api_key]"));
  jwt::Signer ed(jwt::Alg::EdDSA, "ed");
  g.keys()->install(setOf({&ed}));
  auto o = g.call(ed.token(claims("alice")));
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.tenant, "eng");
  EXPECT_EQ(o.subject, "alice");
  o = g.call(ed.token(claims("olga", "operations")));
  EXPECT_EQ(o.tenant, "ops");
  // A gateway key goes to the next link; another issuer's token too (and is no key).
  o = g.call("tk-unit-key");
  EXPECT_TRUE(o.ok);
  EXPECT_EQ(o.subject, "");
  bj::object foreign = claims("zed");
  foreign["iss"] = "https://other.example";
  o = g.call(ed.token(foreign));
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.error, "Invalid API key.");
  o = g.call(ed.token(claims("nina", "sales")));
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.error.find("(no_tenant)"), std::string::npos) << o.error;
}

TEST(JwtLink, ACachedTokenLastsAsLongAsItsKeyIsListed) {
  Gate g(issuerYaml("http://127.0.0.1:9/unit-2", "[jwt]"));
  jwt::Signer a(jwt::Alg::ES256, "a"), b(jwt::Alg::RS256, "b");
  auto keys = g.keys();
  keys->install(setOf({&a}));
  const std::string token = a.token(claims("carl"));
  ASSERT_TRUE(g.call(token).ok);
  // The keys change but still list `a` (the same object): the cached token stays good.
  auto both = jwt::KeySet::of({keys->keys()->keys()[0], setOf({&b})->keys()[0]});
  keys->install(both);
  EXPECT_TRUE(g.call(token).ok);
  EXPECT_TRUE(g.call(b.token(claims("bea"))).ok);
  // `a` leaves the set: its token, cached or not, is refused (no fetch here: at once).
  keys->install(setOf({&b}));
  auto o = g.call(token);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.error.find("(unknown_key)"), std::string::npos) << o.error;
  EXPECT_EQ(o.error.find(token.substr(0, 16)), std::string::npos);
}

TEST(JwtConfig, RefusesWhatCannotWork) {
  auto error = [](const std::string& auth) {
    auto r = loadConfigString(baseYaml() + auth, "jwt.yaml");
    return r.config ? std::string() : r.error;
  };
  EXPECT_NE(error("auth: {chains: [{links: [jwt]}]}\n").find("type jwt needs auth.jwt_issuers"), std::string::npos);
  EXPECT_NE(error(std::string("auth: {jwt_issuers: [{name: c, issuer: \"") + kIssuer + "\", tenant: eng}]}\n").find("audience"),
            std::string::npos);
  EXPECT_NE(error(std::string("auth: {jwt_issuers: [{name: c, issuer: \"") + kIssuer + "\", audience: x}]}\n")
                .find("needs tenant_claim or tenant"),
            std::string::npos);
  EXPECT_NE(error(std::string("auth: {jwt_issuers: [{name: c, issuer: \"") + kIssuer +
                  "\", audience: x, tenant_claim: t, tenants: {a: nobody}}]}\n")
                .find("unknown tenant \"nobody\""),
            std::string::npos);
  EXPECT_NE(error(std::string("auth: {jwt_issuers: [{name: c, issuer: \"") + kIssuer +
                  "\", audience: x, tenant: eng, clock_skew: 1h}]}\n")
                .find("at most 10m"),
            std::string::npos);
  EXPECT_NE(error("auth: {jwt_issuers: [{name: c, issuer: not-a-url, audience: x, tenant: eng}]}\n").find("jwks_url or discovery_url"),
            std::string::npos);
  const std::string ok = error(std::string("auth: {jwt_issuers: [{name: c, issuer: \"") + kIssuer +
                               "\", audience: x, tenant: eng}], chains: [{links: [jwt, api_key]}]}\n"
                               "rate_limits: {}\n");
  EXPECT_EQ(ok, "");
  auto r = loadConfigString(baseYaml() + std::string("auth: {jwt_issuers: [{name: c, issuer: \"") + kIssuer +
                                "/\", audience: x, tenant: eng}]}\n",
                            "jwt.yaml");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->auth.jwt_issuers[0].discovery_url, std::string(kIssuer) + "/.well-known/openid-configuration");
  EXPECT_EQ(r.config->auth.jwt_issuers[0].clock_skew, Millis(60'000));
}

}  // namespace jwt_link_test
}  // namespace tahua
