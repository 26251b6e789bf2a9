// Tenants, their API keys, the authentication chains and the limits over all tenants:
// the `tenants`, `keys`, `auth`, `rate_limits` and `admin.tenant_tokens` sections.
#include <array>
#include <cctype>
#include <cstdlib>
#include <set>

#include "config/loader_detail.h"
#include "core/sha256.h"
#include "core/utc_time.h"
#include "http/http_url.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

// A company-wide budget may be large; 1e12 USD still fits the store's micro-USD counters.
constexpr double kMaxBudgetUsd = 1e12;
constexpr std::uint64_t kMaxCount = 1'000'000'000'000;

// The limits of one scope (LimitSet): rates, quotas and budgets, which policies and their
// rules also take, then the concurrency caps. Absent: no limit of that kind.
constexpr Field kRateFields[] = {
    integer("requests_per_minute", 1, kMaxCount, "",
            "Requests in a sliding window of 60 s; over it: 429 rate_limit_exceeded with Retry-After."),
    integer("tokens_per_minute", 1, kMaxCount, "",
            "A token bucket holding this many, refilled as many per minute. A request reserves its estimate (prompt "
            "~ body bytes / 4, plus max_tokens or `rate_limits.default_max_tokens`), calibrated to the usage reported."),
    integer("tokens_per_day", 1, kMaxCount, "",
            "A quota of tokens over the UTC calendar day; over it: 429 insufficient_quota until the day ends."),
    integer("tokens_per_month", 1, kMaxCount, "", "The same over the UTC calendar month."),
    number("usd_per_day", kMaxBudgetUsd, "",
           "A budget over the UTC day, priced from the models' `pricing` (a model without prices costs nothing); over "
           "it: 429 insufficient_quota. 0: none.",
           "USD"),
    number("usd_per_month", kMaxBudgetUsd, "", "The same over the UTC calendar month.", "USD"),
};
constexpr Field kCapFields[] = {
    integer("max_concurrent_requests", 1, kMaxCount, "",
            "Requests of the scope in flight at once, over every worker (a bulkhead); over it: 429 "
            "concurrency_limit_exceeded."),
    integer("max_concurrent_streams", 1, kMaxCount, "", "The same for streams."),
};

// One table's fields from several arrays, in order.
template <std::size_t... N>
constexpr std::array<Field, (N + ...)> joined(const Field (&... parts)[N]) {
  std::array<Field, (N + ...)> out{};
  std::size_t i = 0;
  const auto put = [&](const auto& part) {
    for (const Field& f : part) out[i++] = f;
  };
  (put(parts), ...);
  return out;
}

constexpr auto kLimitFields = joined(kRateFields, kCapFields);

constexpr Field kTenantFields[] = {
    nonEmpty("name", "", "Letters, digits, '-', '_' and '.'; unique. Keys, records and metrics name it.").needed(),
    list("models", "[]",
         "The models its keys may use; another gets 403 model_not_allowed and is not in /v1/models. Empty: all."),
    section("limits", "All of the tenant's keys together."),
    map("model_limits", "{}", "Model name to limits (the fields of `tenants[].limits`): the tenant's use of that model."),
    section("subject_limits",
            "Each person or service signed in with a JWT (auth.jwt_issuers) and mapped to this tenant, counted per subject, "
            "unless `subjects` gives them their own. Rates, quotas and budgets (no caps)."),
    map("subjects", "{}",
        "Subject (the issuer's subject claim, e.g. an e-mail or a service id) to its own limits, instead of "
        "`subject_limits`."),
};
const Table kTenant("tenants[]", "A tenant: a team with its own keys, models and limits.", kTenantFields);
const Table kTenantLimits("tenants[].limits",
                          "Limits of one scope; every limit that applies to a request (tenant, key, tenant x model, "
                          "model, policies) must pass, atomically. Absent: no limit of that kind.",
                          kLimitFields);
const Table kTenantSubjectLimits("tenants[].subject_limits",
                                 "The limits each subject of the tenant gets by default, counted per subject.", kRateFields);
const Table kTenantSubjects("tenants[].subjects.*", "One subject's own limits (rates, quotas, budgets).", kRateFields);
const Table kTenantModelLimits("tenants[].model_limits.*", "The tenant's limits for one model (tenant x model).", kLimitFields);

constexpr Field kKeyFields[] = {
    nonEmpty("name", "", "Unique among keys; logged and shown (never the key).").needed(),
    nonEmpty("tenant", "", "The tenant the key belongs to (declared under `tenants`).").needed(),
    string("sha256", "",
           "The key's SHA-256 as 64 hex digits (`printf %s \"$KEY\" | sha256sum`), never the key itself; unique.")
        .needed(),
    string("prefix", "\"\"", "A display prefix, at most 12 characters, for people to recognise the key in lists and logs."),
    list("models", "[]", "The models the key may use, within its tenant's; empty: the tenant's."),
    string("expires_at", "",
           "A UTC time (2027-01-31T00:00:00Z or 2027-01-31) after which the key gets 401 invalid_api_key; absent: never."),
    section("limits", "The key's own limits."),
    map("metadata", "{}", "Names to text kept with the key (the admin API shows them)."),
};
const Table kKey("keys[]",
                 "An API key of a tenant, declared by its hash. A request presents it in `Authorization: Bearer`, "
                 "`x-api-key` or `api-key`.",
                 kKeyFields);
const Table kKeyLimits("keys[].limits", "The key's own limits (the fields of `tenants[].limits`).", kLimitFields);

constexpr Field kTokenFields[] = {
    nonEmpty("name", "", "Names the token in the audit log.").needed(),
    nonEmpty("tenant", "", "The one tenant whose keys it manages (declared under `tenants`).").needed(),
    string("sha256", "", "The token's SHA-256 as 64 hex digits, never the token itself.").needed(),
};
constexpr Field kAdminTokenFields[] = {
    nonEmpty("name", "", "Names the token in the audit log; unique among admin tokens (`admin` is admin.token's).").needed(),
    string("sha256", "", "The token's SHA-256 as 64 hex digits, never the token itself. This or token_env."),
    nonEmpty("token_env", "",
             "The environment variable holding the token (read at start, at least 16 characters, kept only as its "
             "SHA-256; unset: this token is off, warned)."),
};
const Table kAdminToken("admin.tokens[]", "A named token of the admin API with the admin token's rights.", kAdminTokenFields);

const Table kTenantToken("admin.tenant_tokens[]",
                         "A token of the admin API that manages one tenant's keys only, and sees only its tenant.",
                         kTokenFields);

constexpr Field kAuthFields[] = {
    boolean("enabled", "",
            "Require an API key on every API path (none: 401 missing_api_key). Absent: on when `tenants` or `keys` "
            "are declared, else off (warned at start)."),
    list("chains", "[]",
         "Chains of links, each for the requests it matches; the first match wins. None matching: the built-in key "
         "check alone."),
    list("jwt_issuers", "[]",
         "Identity providers whose JWTs a `jwt` link accepts as the bearer token (docs/tenants-and-limits.md, "
         "\"Signing in with your identity provider\")."),
};
const Table kAuth("auth", "How callers are authenticated (docs/tenants-and-limits.md).", kAuthFields);

constexpr Field kChainFields[] = {
    nonEmpty("name", "", "Names the chain in logs; absent: `chain-<index>`."),
    section("match", "The requests the chain is for; absent: every request."),
    list("links", "",
         "The links in order: each authenticates, refuses, or passes to the next; a request every link passed gets 401.")
        .needed(),
};
const Table kChain("auth.chains[]", "A chain of authentication links.", kChainFields);

constexpr Field kChainMatchFields[] = {
    nonEmpty("path_prefix", "", "Paths starting with this (it starts with /); absent: any path."),
    map("headers", "{}", "Header name to exact value (\"*\": present); all must hold."),
};
const Table kChainMatch("auth.chains[].match", "Which requests take the chain.", kChainMatchFields);

constexpr Field kLinkFields[] = {
    choice("type", "api_key | anonymous | plugin | jwt", "",
           "api_key: the built-in key check; anonymous: requests reaching it count against `tenant`; plugin: the "
           "on_auth of plugin `id` (docs/plugins.md); jwt: a bearer JWT of one of `auth.jwt_issuers` (another "
           "issuer, or no JWT: the next link). A link may be the bare word `api_key` or `jwt`.")
        .needed(),
    nonEmpty("tenant", "", "anonymous: the tenant whose limits its requests count against (required there)."),
    nonEmpty("id", "", "plugin: the id of a plugin that defines on_auth (required there)."),
};
constexpr Field kJwtIssuerFields[] = {
    nonEmpty("name", "", "Names the issuer in logs and usage records; unique.").needed(),
    nonEmpty("issuer", "", "The tokens' `iss`, exactly (an https URL, usually).").needed(),
    list("audience", "",
         "The audiences accepted: a token's `aud` must hold one of them (a name, or a list of names).")
        .needed(),
    nonEmpty("discovery_url", "",
             "The OIDC discovery document, whose jwks_uri names the keys; absent: "
             "`issuer` + /.well-known/openid-configuration."),
    nonEmpty("jwks_url", "", "The JWKS itself, without discovery."),
    nonEmpty("subject_claim", "sub", "The claim naming the caller (a person or a service): usage records and per-subject limits."),
    nonEmpty("tenant_claim", "",
             "The claim whose value names the tenant (through `tenants` when given, else the tenant of that name)."),
    map("tenants", "{}", "A `tenant_claim` value to a tenant's name."),
    nonEmpty("tenant", "",
             "The tenant when there is no `tenant_claim`, or its value is absent or unmapped; absent then: 401."),
    nonEmpty("models_claim", "",
             "A claim listing the models the caller may use (a list, or one space-separated string), within its "
             "tenant's; absent from a token: the tenant's."),
    duration("clock_skew", 0, "60s", "Tolerance for exp and nbf (at most 10m)."),
    duration("deadline", 10, "2s",
             "The longest a request waits for the keys when its token names a key not yet known (a refresh); then 401 "
             "unknown_key."),
    duration("fetch_timeout", 10, "5s", "One discovery or JWKS fetch, start to end."),
    duration("refresh_interval", 1000, "10m", "The keys are refetched this often (off the request path)."),
    duration("min_refresh_interval", 0, "30s",
             "A token with an unknown kid refetches the keys at most this often (others get 401 unknown_key at once)."),
    integer("cache_entries", 1, 1'000'000, "10000",
            "Verified tokens kept per worker (by the token's SHA-256; none outlives its exp or its key)."),
};
const Table kJwtIssuer("auth.jwt_issuers[]", "An identity provider (OIDC) whose signed JWTs identify callers.", kJwtIssuerFields);

const Table kLink("auth.chains[].links[]", "A link: `api_key`, or a mapping with `type` and its settings.", kLinkFields);

constexpr Field kRateLimitsFields[] = {
    integer("default_max_tokens", 0, 10'000'000, "1024",
            "Completion tokens reserved for a request that sets no max_tokens (when a token limit applies); "
            "calibrated to the real count afterwards."),
    map("models", "{}", "Model name to limits over every caller together (the fields of `tenants[].limits`)."),
    list("policies", "[]", "Rate-limit policies: limits for the requests they match (also RateLimitPolicy resources)."),
    boolean("end_streams_over_budget", "false",
            "End a stream whose output passes what its tenant, key and model token limits still allowed at admission, "
            "with an error event, and cancel the upstream call; else it runs on and the limits go into debt."),
};
const Table kRateLimits("rate_limits", "Limits over all tenants, and how token limits estimate a request.", kRateLimitsFields);
const Table kModelLimits("rate_limits.models.*", "One model's limits, every caller together.", kLimitFields);

constexpr Field kPolicyOwnFields[] = {
    nonEmpty("name", "", "Unique among policies; absent: `policy-<index>` (a RateLimitPolicy: its resource's name)."),
    section("match", "The requests the policy applies to; absent: every request."),
    choice("per", "key | tenant | all", "key", "What is counted together: each key, each tenant, or every caller."),
    nonEmpty("client_header", "x-client-type", "The request header whose value picks a rule (the client type)."),
    list("rules", "[]", "Limits per client type, each over the policy's own for its requests."),
};
constexpr Field kPolicyStreamFields[] = {
    boolean("end_streams_over_budget", "false", "As `rate_limits.end_streams_over_budget`, for this policy's token limits."),
};
constexpr auto kLimitPolicyFields = joined(kPolicyOwnFields, kRateFields, kPolicyStreamFields);
const Table kLimitPolicy("rate_limits.policies[]",
                    "A rate-limit policy. Its limit fields (those of `tenants[].limits` but the caps) are the default, "
                    "for the requests no rule takes; it needs limits or rules.",
                    kLimitPolicyFields);

constexpr Field kPolicyMatchFields[] = {
    list("model", "[]",
         "A model name or a list, as the client asked or as a route chose (a route alias counts); empty: any."),
    list("tenant", "[]", "A tenant name or a list; empty: any."),
    list("key", "[]", "A key name or a list; empty: any."),
    list("route", "[]", "A route name or a list: the route that chose the model (and routes naming the policy in policyRef)."),
};
const Table kPolicyMatch("rate_limits.policies[].match",
                         "Which requests the policy applies to: every list given must hold the request's.",
                         kPolicyMatchFields);

constexpr Field kRuleOwnFields[] = {
    nonEmpty("client_type", "", "The value of the policy's client_header this rule is for; unique in the policy.").needed(),
    section("rollout", "The rule for a share of its requests only; the rest get the policy's default."),
};
constexpr auto kLimitRuleFields = joined(kRuleOwnFields, kRateFields);
const Table kLimitRule("rate_limits.policies[].rules[]",
                  "A client type's limits (the fields of `tenants[].limits` but the caps; at least one).", kLimitRuleFields);

constexpr Field kRolloutFields[] = {
    number("percent", 100, "", "The share of the rule's requests it applies to.", "a percentage").needed(),
    nonEmpty("hash_header", "",
             "The header hashed to pick the share, so a caller stays on one side; absent: the caller's key (or tenant)."),
};
const Table kRollout("rate_limits.policies[].rules[].rollout", "A rule rolled out to a share of its requests.", kRolloutFields);

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 64 hex digits into `out`; false when they are not.
bool sha256Hex(const std::string& hex, std::array<unsigned char, 32>& out) {
  bool ok = hex.size() == 64;
  for (std::size_t j = 0; ok && j < 32; ++j) {
    const int hi = hexDigit(hex[2 * j]), lo = hexDigit(hex[2 * j + 1]);
    ok = hi >= 0 && lo >= 0;
    if (ok) out[j] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return ok;
}

// Each field of a `match:` mapping, a name or a list of names, appended to its list.
void appendNames(Loader& loader, const YAML::Node& m, const std::string& p, std::initializer_list<Loader::MatchField> fields) {
  for (const auto& [field, out] : fields) {
    const YAML::Node v = m[std::string(field)];
    if (!v) continue;
    const std::string fp = Loader::join(p, field);
    if (v.IsSequence())
      for (std::size_t k = 0; k < v.size(); ++k) out->push_back(loader.nonEmpty(v[k], fp + "[" + std::to_string(k) + "]"));
    else
      out->push_back(loader.nonEmpty(v, fp));
  }
}

void lowerCase(std::string& s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
}

}  // namespace

LimitSet Loader::limitSet(Fields& f, bool caps) {
  LimitSet l;
  f.read("requests_per_minute", l.requests_per_minute);
  f.read("tokens_per_minute", l.tokens_per_minute);
  f.read("tokens_per_day", l.tokens_per_day);
  f.read("tokens_per_month", l.tokens_per_month);
  if (caps) {
    f.read("max_concurrent_requests", l.max_concurrent_requests);
    f.read("max_concurrent_streams", l.max_concurrent_streams);
  }
  f.read("usd_per_day", l.usd_per_day);
  f.read("usd_per_month", l.usd_per_month);
  return l;
}

std::vector<std::string> Loader::modelList(const YAML::Node& n, const std::string& p, const Config& cfg) {
  if (!n.IsSequence()) fail(n, p, "expected a list of model names");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string ip = p + "[" + std::to_string(i) + "]";
    std::string name = nonEmpty(n[i], ip);
    if (!cfg.findModel(name)) fail(n[i], ip, "unknown model \"" + name + "\"");
    out.push_back(std::move(name));
  }
  return out;
}

void Loader::loadTenants(const YAML::Node& n, Config& cfg) {
  if (!n.IsSequence()) fail(n, "tenants", "expected a list of tenants");
  std::set<std::string, std::less<>> names;
  for (std::size_t i = 0; i < n.size(); ++i) {
    Fields f(*this, n[i], "tenants[" + std::to_string(i) + "]", kTenant);
    TenantConfig t;
    f.read("name", t.name);
    for (char c : t.name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
        fail(f["name"], f.at("name"), "may only hold letters, digits, '-', '_' and '.'");
    if (!names.insert(t.name).second) fail(f["name"], f.at("name"), "duplicate tenant \"" + t.name + "\"");
    if (auto v = f["models"]) t.models = modelList(v, f.at("models"), cfg);
    if (auto v = f["limits"]) {
      Fields lf(*this, v, f.at("limits"), kTenantLimits);
      t.limits = limitSet(lf);
    }
    if (auto m = f["model_limits"]) {
      if (!m.IsMap()) fail(m, f.at("model_limits"), "expected a mapping of model name to limits");
      for (const auto& kv : m) {
        const std::string model = str(kv.first, f.at("model_limits"));
        const std::string mp = f.at("model_limits") + "." + model;
        if (!cfg.findModel(model)) fail(kv.first, mp, "unknown model \"" + model + "\"");
        Fields lf(*this, kv.second, mp, kTenantModelLimits);
        t.model_limits.emplace_back(model, limitSet(lf));
      }
    }
    if (auto v = f["subject_limits"]) {
      Fields lf(*this, v, f.at("subject_limits"), kTenantSubjectLimits);
      t.subject_limits = limitSet(lf, false);
    }
    if (auto m = f["subjects"]) {
      if (!m.IsMap()) fail(m, f.at("subjects"), "expected a mapping of subject to limits");
      for (const auto& kv : m) {
        const std::string subject = str(kv.first, f.at("subjects"));
        const std::string sp = f.at("subjects") + "." + subject;
        if (subject.empty() || subject.size() > 256) fail(kv.first, sp, "a subject is 1-256 characters");
        Fields lf(*this, kv.second, sp, kTenantSubjects);
        t.subjects.emplace_back(subject, limitSet(lf, false));
      }
    }
    cfg.tenants.push_back(std::move(t));
  }
}

void Loader::loadKeys(const YAML::Node& n, Config& cfg) {
  if (!n.IsSequence()) fail(n, "keys", "expected a list of API keys");
  std::set<std::string, std::less<>> names;
  std::set<std::array<unsigned char, 32>> digests;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const YAML::Node& y = n[i];
    Fields f(*this, y, "keys[" + std::to_string(i) + "]", kKey);
    ApiKeyConfig k;
    for (const char* req : {"name", "tenant", "sha256"})
      if (!f[req]) fail(y, f.at(req), "required");
    f.read("name", k.name);
    if (!names.insert(k.name).second) fail(f["name"], f.at("name"), "duplicate key name \"" + k.name + "\"");
    f.read("tenant", k.tenant);
    const TenantConfig* tenant = nullptr;
    for (const auto& t : cfg.tenants)
      if (t.name == k.tenant) tenant = &t;
    if (!tenant) fail(f["tenant"], f.at("tenant"), "unknown tenant \"" + k.tenant + "\" (declare it under `tenants`)");
    // The hash, never the key: a config file in git must not hold secrets.
    std::string hex;
    f.read("sha256", hex);
    if (!sha256Hex(hex, k.sha256))
      fail(f["sha256"], f.at("sha256"),
           "expected the key's SHA-256 as 64 hex digits (printf %s \"$KEY\" | sha256sum), not the key itself");
    if (!digests.insert(k.sha256).second) fail(f["sha256"], f.at("sha256"), "the same key is declared twice");
    if (f.read("prefix", k.prefix) && k.prefix.size() > 12)
      fail(f["prefix"], f.at("prefix"), "at most 12 characters: a display prefix, not the key");
    if (auto v = f["models"]) {
      k.models = modelList(v, f.at("models"), cfg);
      if (!tenant->models.empty())
        for (std::size_t j = 0; j < k.models.size(); ++j) {
          bool allowed = false;
          for (const auto& m : tenant->models) allowed = allowed || m == k.models[j];
          if (!allowed)
            fail(v[j], f.at("models") + "[" + std::to_string(j) + "]",
                 "model \"" + k.models[j] + "\" is not among tenant \"" + k.tenant + "\"'s models");
        }
    }
    std::string expires;
    if (f.read("expires_at", expires)) {
      k.expires_at = parseUtcTime(expires);
      if (k.expires_at < 0) fail(f["expires_at"], f.at("expires_at"), "expected a UTC time such as 2027-01-31T00:00:00Z or 2027-01-31");
    }
    if (auto v = f["limits"]) {
      Fields lf(*this, v, f.at("limits"), kKeyLimits);
      k.limits = limitSet(lf);
    }
    if (auto m = f["metadata"]) {
      if (!m.IsMap()) fail(m, f.at("metadata"), "expected a mapping of name to text");
      for (const auto& kv : m) {
        const std::string name = str(kv.first, f.at("metadata"));
        k.metadata.emplace_back(name, str(kv.second, f.at("metadata") + "." + name));
      }
    }
    cfg.keys.push_back(std::move(k));
  }
}

void Loader::loadAuth(const YAML::Node& n, Config& cfg) {
  Fields f(*this, n, "auth", kAuth);
  f.read("enabled", cfg.auth.enabled);
  if (auto j = f["jwt_issuers"]) loadJwtIssuers(j, cfg);
  auto c = f["chains"];
  if (!c) return;
  if (!c.IsSequence()) fail(c, "auth.chains", "expected a list of chains");
  for (std::size_t i = 0; i < c.size(); ++i) {
    const std::string p = "auth.chains[" + std::to_string(i) + "]";
    const YAML::Node& y = c[i];
    Fields cf(*this, y, p, kChain);
    AuthChainConfig chain;
    if (!cf.read("name", chain.name)) chain.name = "chain-" + std::to_string(i);
    if (auto m = cf["match"]) {
      Fields mf(*this, m, cf.at("match"), kChainMatch);
      if (mf.read("path_prefix", chain.path_prefix) && chain.path_prefix.front() != '/')
        fail(mf["path_prefix"], mf.at("path_prefix"), "must start with /");
      if (auto h = mf["headers"]) {
        if (!h.IsMap()) fail(h, mf.at("headers"), "expected a mapping of name to value");
        for (const auto& kv : h) {
          std::string name = str(kv.first, mf.at("headers"));
          lowerCase(name);
          chain.headers.emplace_back(name, str(kv.second, mf.at("headers") + "." + name));
        }
      }
    }
    auto links = cf["links"];
    if (!links || !links.IsSequence() || links.size() == 0) fail(links ? links : y, p + ".links", "required: a non-empty list");
    for (std::size_t j = 0; j < links.size(); ++j) {
      const std::string lp = p + ".links[" + std::to_string(j) + "]";
      const YAML::Node& l = links[j];
      AuthLinkConfig link;
      // `api_key` alone, or a mapping with `type` (and its settings).
      const YAML::Node type = l.IsMap() ? l["type"] : l;
      if (l.IsMap()) checkKeys(l, lp, kLink);
      if (!type) fail(l, lp + ".type", "required");
      const std::string t = str(type, lp + (l.IsMap() ? ".type" : ""));
      if (t == "jwt") {
        link.type = AuthLinkConfig::Type::Jwt;
        if (cfg.auth.jwt_issuers.empty()) fail(l, lp, "type jwt needs auth.jwt_issuers (the identity providers it accepts)");
        if (l.IsMap() && l["tenant"]) fail(l["tenant"], lp + ".tenant", "not used by type jwt (auth.jwt_issuers[] map tenants)");
        if (l.IsMap() && l["id"]) fail(l["id"], lp + ".id", "not used by type jwt");
      } else if (t == "api_key") {
        link.type = AuthLinkConfig::Type::ApiKey;
        if (l.IsMap() && l["tenant"]) fail(l["tenant"], lp + ".tenant", "not used by type api_key");
        if (l.IsMap() && l["id"]) fail(l["id"], lp + ".id", "not used by type api_key");
      } else if (t == "plugin") {
        // The plugin's on_auth (plugins:, or a Plugin resource); checked once every
        // plugin is read (checkAuthPlugins).
        link.type = AuthLinkConfig::Type::Plugin;
        if (!l.IsMap() || !l["id"]) fail(l, lp + ".id", "required for type plugin (the id of a plugin that defines on_auth)");
        if (l["tenant"]) fail(l["tenant"], lp + ".tenant", "not used by type plugin (the plugin names the tenant)");
        link.plugin = nonEmpty(l["id"], lp + ".id");
      } else if (t == "anonymous") {
        link.type = AuthLinkConfig::Type::Anonymous;
        if (!l.IsMap() || !l["tenant"]) fail(l, lp + ".tenant", "required for type anonymous (whose limits its requests count against)");
        link.tenant = nonEmpty(l["tenant"], lp + ".tenant");
        bool known = false;
        for (const auto& tc : cfg.tenants) known = known || tc.name == link.tenant;
        if (!known) fail(l["tenant"], lp + ".tenant", "unknown tenant \"" + link.tenant + "\"");
        if (l["id"]) fail(l["id"], lp + ".id", "not used by type anonymous");
      } else {
        fail(type, lp + ".type", "unknown link type \"" + t + "\" (api_key | anonymous | plugin | jwt)");
      }
      chain.links.push_back(std::move(link));
    }
    cfg.auth.chains.push_back(std::move(chain));
  }
}

void Loader::loadJwtIssuers(const YAML::Node& n, Config& cfg) {
  if (!n.IsSequence()) fail(n, "auth.jwt_issuers", "expected a list of issuers");
  auto knownTenant = [&](const std::string& name) {
    for (const auto& t : cfg.tenants)
      if (t.name == name) return true;
    return false;
  };
  for (std::size_t i = 0; i < n.size(); ++i) {
    const YAML::Node& y = n[i];
    Fields f(*this, y, "auth.jwt_issuers[" + std::to_string(i) + "]", kJwtIssuer);
    JwtIssuerConfig j;
    f.read("name", j.name);
    for (const auto& other : cfg.auth.jwt_issuers)
      if (other.name == j.name) fail(f["name"], f.at("name"), "duplicate issuer \"" + j.name + "\"");
    f.read("issuer", j.issuer);
    for (const auto& other : cfg.auth.jwt_issuers)
      if (other.issuer == j.issuer) fail(f["issuer"], f.at("issuer"), "another issuer entry has the same iss");
    auto a = f["audience"];
    if (!a) fail(y, f.at("audience"), "required: the audience (aud) tokens must be meant for");
    {
      if (a.IsSequence()) f.read("audience", j.audiences);
      else j.audiences.push_back(nonEmpty(a, f.at("audience")));
      if (j.audiences.empty()) fail(a, f.at("audience"), "at least one audience");
    }
    // Keys over plain http are only for tests and loopback; say https in production.
    for (const char* field : {"discovery_url", "jwks_url"}) {
      std::string url;
      if (!f.read(field, url)) continue;
      std::string why;
      if (!parseHttpUrl(url, &why, true)) fail(f[field], f.at(field), "expected an http(s) URL: " + why);
      (std::string_view(field) == "jwks_url" ? j.jwks_url : j.discovery_url) = url;
    }
    if (j.jwks_url.empty() && j.discovery_url.empty()) {
      std::string base = j.issuer;
      while (!base.empty() && base.back() == '/') base.pop_back();
      j.discovery_url = base + "/.well-known/openid-configuration";
      std::string why;
      if (!parseHttpUrl(j.discovery_url, &why, true))
        fail(f["issuer"], f.at("issuer"), "not a URL to discover the keys from: set jwks_url or discovery_url");
    }
    f.read("subject_claim", j.subject_claim);
    f.read("tenant_claim", j.tenant_claim);
    if (auto m = f["tenants"]) {
      if (!m.IsMap()) fail(m, f.at("tenants"), "expected a mapping of claim value to tenant");
      if (j.tenant_claim.empty()) fail(m, f.at("tenants"), "needs tenant_claim (the claim whose values it maps)");
      for (const auto& kv : m) {
        const std::string value = str(kv.first, f.at("tenants"));
        const std::string tenant = nonEmpty(kv.second, f.at("tenants") + "." + value);
        if (!knownTenant(tenant)) fail(kv.second, f.at("tenants") + "." + value, "unknown tenant \"" + tenant + "\"");
        j.tenants.emplace_back(value, tenant);
      }
    }
    if (f.read("tenant", j.tenant) && !knownTenant(j.tenant))
      fail(f["tenant"], f.at("tenant"), "unknown tenant \"" + j.tenant + "\"");
    if (j.tenant_claim.empty() && j.tenant.empty())
      fail(y, f.path(), "needs tenant_claim or tenant (which tenant a caller's requests count against)");
    f.read("models_claim", j.models_claim);
    f.read("clock_skew", j.clock_skew);
    if (j.clock_skew > Millis(600'000)) fail(f["clock_skew"], f.at("clock_skew"), "at most 10m");
    f.read("deadline", j.deadline);
    f.read("fetch_timeout", j.fetch_timeout);
    f.read("refresh_interval", j.refresh_interval);
    f.read("min_refresh_interval", j.min_refresh_interval);
    f.read("cache_entries", j.cache_entries);
    cfg.auth.jwt_issuers.push_back(std::move(j));
  }
}

void Loader::loadTenantTokens(const YAML::Node& n, Config& cfg) {
  const std::string p = "admin.tenant_tokens";
  if (!n.IsSequence()) fail(n, p, "expected a list of {name, tenant, sha256}");
  for (std::size_t i = 0; i < n.size(); ++i) {
    const YAML::Node& y = n[i];
    Fields f(*this, y, p + "[" + std::to_string(i) + "]", kTenantToken);
    for (const char* req : {"name", "tenant", "sha256"})
      if (!f[req]) fail(y, f.at(req), "required");
    TenantAdminToken t;
    f.read("name", t.name);
    f.read("tenant", t.tenant);
    bool known = false;
    for (const auto& tc : cfg.tenants) known = known || tc.name == t.tenant;
    if (!known) fail(f["tenant"], f.at("tenant"), "unknown tenant \"" + t.tenant + "\" (declare it under `tenants`)");
    std::string hex;
    f.read("sha256", hex);
    if (!sha256Hex(hex, t.sha256))
      fail(f["sha256"], f.at("sha256"), "expected the token's SHA-256 as 64 hex digits, not the token itself");
    for (const auto& g : cfg.admin.tokens)
      if (g.name == t.name) fail(f["name"], f.at("name"), "\"" + t.name + "\" names an admin.tokens entry already");
    for (const auto& o : cfg.admin.tenant_tokens)
      if (o.name == t.name) fail(f["name"], f.at("name"), "duplicate name \"" + t.name + "\"");
    if (t.name == "admin") fail(f["name"], f.at("name"), "\"admin\" names admin.token");
    cfg.admin.tenant_tokens.push_back(std::move(t));
  }
}

void Loader::loadAdminTokens(const YAML::Node& n, Config& cfg) {
  const std::string p = "admin.tokens";
  if (!n.IsSequence()) fail(n, p, "expected a list of {name, sha256 | token_env}");
  for (std::size_t i = 0; i < n.size(); ++i) {
    const YAML::Node& y = n[i];
    Fields f(*this, y, p + "[" + std::to_string(i) + "]", kAdminToken);
    if (!f["name"]) fail(y, f.at("name"), "required");
    if (!f["sha256"] == !f["token_env"]) fail(y, f.at("sha256"), "set sha256 or token_env (one of them)");
    GlobalAdminToken t;
    f.read("name", t.name);
    if (t.name == "admin") fail(f["name"], f.at("name"), "\"admin\" names admin.token; pick another name");
    for (const auto& o : cfg.admin.tokens)
      if (o.name == t.name) fail(f["name"], f.at("name"), "duplicate name \"" + t.name + "\"");
    if (f["sha256"]) {
      std::string hex;
      f.read("sha256", hex);
      if (!sha256Hex(hex, t.sha256))
        fail(f["sha256"], f.at("sha256"), "expected the token's SHA-256 as 64 hex digits, not the token itself");
    } else {
      std::string env_name;
      f.read("token_env", env_name);
      const char* env = std::getenv(env_name.c_str());
      if (!env || !*env) {
        warnings_.push_back(p + "[" + std::to_string(i) + "]: environment variable " + env_name + " is not set; the token '" + t.name +
                            "' is off");
        continue;
      }
      if (std::string_view(env).size() < 16) fail(f["token_env"], f.at("token_env"), "the token in " + env_name + " must be at least 16 characters");
      t.sha256 = sha256(env);
    }
    cfg.admin.tokens.push_back(std::move(t));
  }
}

void Loader::matchLists(const YAML::Node& m, const std::string& p, const schema::Table& table,
                        std::initializer_list<MatchField> fields) {
  checkKeys(m, p, table);
  appendNames(*this, m, p, fields);
}

RateLimitPolicyConfig Loader::rateLimitPolicy(const YAML::Node& y, const std::string& p, const Config&) {
  Fields f(*this, y, p, kLimitPolicy);
  RateLimitPolicyConfig pol;
  f.read("end_streams_over_budget", pol.end_streams_over_budget);
  f.read("name", pol.name);
  // Models are matched by the name the client asked for or the model a route chose, so a
  // route alias ("auto") is a valid name here.
  if (auto m = f["match"])
    matchLists(m, f.at("match"), kPolicyMatch, {{"model", &pol.models}, {"tenant", &pol.tenants}, {"key", &pol.keys}, {"route", &pol.routes}});
  if (auto v = f["per"]) {
    const std::string per = str(v, f.at("per"));
    if (per == "key") pol.per = RateLimitPolicyConfig::Per::Key;
    else if (per == "tenant") pol.per = RateLimitPolicyConfig::Per::Tenant;
    else if (per == "all") pol.per = RateLimitPolicyConfig::Per::All;
    else fail(v, f.at("per"), "expected key, tenant or all");
  }
  if (f.read("client_header", pol.client_header)) lowerCase(pol.client_header);
  // The default limits are the policy's own limit fields.
  pol.limits = limitSet(f, false);
  if (auto r = f["rules"]) {
    if (!r.IsSequence()) fail(r, f.at("rules"), "expected a list of rules");
    for (std::size_t i = 0; i < r.size(); ++i) {
      const std::string rp = f.at("rules") + "[" + std::to_string(i) + "]";
      const YAML::Node& ry = r[i];
      Fields rf(*this, ry, rp, kLimitRule);
      RateLimitRule rule;
      if (!rf["client_type"]) fail(ry, rf.at("client_type"), "required: the value of " + pol.client_header + " this rule is for");
      rf.read("client_type", rule.client_type);
      for (const auto& other : pol.rules)
        if (other.client_type == rule.client_type)
          fail(rf["client_type"], rf.at("client_type"), "a rule for \"" + rule.client_type + "\" exists");
      rule.limits = limitSet(rf, false);
      if (!rule.limits.any()) fail(ry, rp, "a rule needs at least one limit");
      if (auto ro = rf["rollout"]) {
        Fields of(*this, ro, rf.at("rollout"), kRollout);
        if (!of["percent"]) fail(ro, of.at("percent"), "required");
        rule.rollout_percent = percent(of["percent"], of.at("percent"));
        if (of.read("hash_header", rule.rollout_header)) lowerCase(rule.rollout_header);
      }
      pol.rules.push_back(std::move(rule));
    }
  }
  if (!pol.limits.any() && pol.rules.empty()) fail(y, p, "a policy needs limits or rules");
  return pol;
}

void Loader::loadRateLimits(const YAML::Node& n, Config& cfg) {
  Fields f(*this, n, "rate_limits", kRateLimits);
  f.read("end_streams_over_budget", cfg.rate_limits.end_streams_over_budget);
  if (auto ps = f["policies"]) {
    if (!ps.IsSequence()) fail(ps, "rate_limits.policies", "expected a list of policies");
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const std::string p = "rate_limits.policies[" + std::to_string(i) + "]";
      RateLimitPolicyConfig pol = rateLimitPolicy(ps[i], p, cfg);
      if (pol.name.empty()) pol.name = "policy-" + std::to_string(i);
      for (const auto& other : cfg.rate_limits.policies)
        if (other.name == pol.name) fail(ps[i]["name"] ? ps[i]["name"] : ps[i], p + ".name", "duplicate policy \"" + pol.name + "\"");
      cfg.rate_limits.policies.push_back(std::move(pol));
    }
  }
  f.read("default_max_tokens", cfg.rate_limits.default_max_tokens);
  if (auto m = f["models"]) {
    if (!m.IsMap()) fail(m, "rate_limits.models", "expected a mapping of model name to limits");
    for (const auto& kv : m) {
      const std::string model = str(kv.first, "rate_limits.models");
      const std::string mp = "rate_limits.models." + model;
      if (!cfg.findModel(model)) fail(kv.first, mp, "unknown model \"" + model + "\"");
      Fields lf(*this, kv.second, mp, kModelLimits);
      cfg.rate_limits.models.emplace_back(model, limitSet(lf));
    }
  }
}

}  // namespace tahua::config_detail
