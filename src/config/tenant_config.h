// Tenants, their API keys, the authentication chains and the limits over all tenants:
// the `tenants`, `keys`, `auth` and `rate_limits` sections (tenants_section.cpp) and
// RateLimitPolicy resources.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/duration.h"

namespace tahua {

// Rate limits and quotas of one scope (a tenant, a key, a tenant x model, a model over
// all tenants); 0 = no limit of that kind. See docs/tenants-and-limits.md.
struct LimitSet {
  std::int64_t requests_per_minute = 0;  // sliding window of 60 s
  std::int64_t tokens_per_minute = 0;    // token bucket: holds this many, refills as many per minute
  std::int64_t tokens_per_day = 0;       // quotas over the UTC calendar day / month
  std::int64_t tokens_per_month = 0;
  double usd_per_day = 0;                // budgets, priced from the models' `pricing`
  double usd_per_month = 0;
  // Concurrency caps (bulkheads) of the scope: in flight at once, over every replica's
  // workers of this process (0 = none). Over it: 429 concurrency_limit_exceeded.
  std::int64_t max_concurrent_requests = 0;
  std::int64_t max_concurrent_streams = 0;
  // Any rate limit, quota or budget (the rate-limit filter's); caps are the bulkhead's.
  bool any() const {
    return requests_per_minute || tokens_per_minute || tokens_per_day || tokens_per_month || usd_per_day > 0 ||
           usd_per_month > 0;
  }
  bool anyCap() const { return max_concurrent_requests || max_concurrent_streams; }
};

struct TenantConfig {
  std::string name;
  std::vector<std::string> models;  // the models its keys may use; empty = all
  LimitSet limits;                  // all of the tenant's keys together
  std::vector<std::pair<std::string, LimitSet>> model_limits;  // tenant x model
  // People and services signed in through an identity provider (the jwt link): each
  // subject's own limits, else `subject_limits`, counted per subject.
  LimitSet subject_limits;
  std::vector<std::pair<std::string, LimitSet>> subjects;  // subject -> its limits
  bool from_store = false;  // created through the admin API (not the config file)
  std::int64_t created_at = 0;
  std::string created_by;
};

// A gateway API key. Only its SHA-256 is kept (config and store alike); `prefix` is the
// key's first characters, for people to recognise it in lists and logs.
struct ApiKeyConfig {
  std::string name;  // unique among keys
  std::string tenant;
  std::array<unsigned char, 32> sha256{};
  std::string prefix;
  std::vector<std::string> models;  // allowed models (within the tenant's); empty = the tenant's
  std::int64_t expires_at = 0;      // unix seconds; 0 = never
  LimitSet limits;
  std::vector<std::pair<std::string, std::string>> metadata;
  bool from_store = false;  // created through the admin API (not the config file)
  std::int64_t created_at = 0;
  std::string created_by;
};

// One link of an authentication chain (see AuthLink): the built-in key check, a fixed
// identity for requests that reach it (internal paths), or a plugin's on_auth.
struct AuthLinkConfig {
  enum class Type { ApiKey, Anonymous, Plugin, Jwt };
  Type type = Type::ApiKey;
  std::string tenant;  // anonymous: the tenant its requests count against
  std::string plugin;  // plugin: its id
};

// A chain of links for the requests it matches (first matching chain wins).
struct AuthChainConfig {
  std::string name;
  std::string path_prefix;  // empty = any
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case name, exact value ("*": present)
  std::vector<AuthLinkConfig> links;
};

// An identity provider whose JWTs the jwt link accepts (auth.jwt_issuers[]).
struct JwtIssuerConfig {
  std::string name;    // logs, metrics, usage records
  std::string issuer;  // the tokens' iss
  std::vector<std::string> audiences;  // the tokens' aud must hold one
  std::string discovery_url;  // default: issuer + /.well-known/openid-configuration
  std::string jwks_url;       // set: the keys are read here, without discovery
  std::string subject_claim = "sub";
  std::string tenant_claim;   // its value names the tenant (through `tenants` when given)
  std::vector<std::pair<std::string, std::string>> tenants;  // claim value -> tenant
  std::string tenant;         // the tenant when the claim is absent or unmapped (or not configured)
  std::string models_claim;   // a list of model names (or one space-separated string)
  Millis clock_skew{60'000};
  Millis deadline{2'000};        // longest a request waits for a refresh (an unknown kid)
  Millis fetch_timeout{5'000};   // one discovery or JWKS fetch
  Millis refresh_interval{600'000};     // the keys are refetched this often
  Millis min_refresh_interval{30'000};  // an unknown kid refetches at most this often
  std::int64_t cache_entries = 10'000;  // verified tokens kept per worker
};

struct AuthConfig {
  bool enabled = false;  // on when tenants or keys are declared, unless auth.enabled says otherwise
  std::vector<JwtIssuerConfig> jwt_issuers;
  std::vector<AuthChainConfig> chains;  // none matching: the built-in key check alone
};

// A rate-limit policy (seed S0 4.2): limits for the requests it matches, with rules per
// client type (the value of `client_header`) and a rollout of a rule to a share of its
// requests (by hash, so a caller stays on one side). Counted per key, per tenant or
// over everyone (`per`).
struct RateLimitRule {
  std::string client_type;
  LimitSet limits;
  double rollout_percent = 100;  // the rule applies to this share; the rest get the default
  std::string rollout_header;    // hashed to pick the share; empty = the caller's key (or tenant)
};

struct RateLimitPolicyConfig {
  std::string name;
  std::vector<std::string> models, tenants, keys;  // match (all given lists must hold the request's); empty = any
  std::vector<std::string> routes;  // match.route: the route that chose the model (and routes naming it in policyRef)
  std::string client_header = "x-client-type";
  enum class Per { Key, Tenant, All };
  Per per = Per::Key;
  LimitSet limits;  // the default, for requests no rule takes
  std::vector<RateLimitRule> rules;
  // A stream whose output passes what this policy's token limits still allowed at
  // admission is ended with an error event (else it runs on and the limits go into debt).
  bool end_streams_over_budget = false;
};

// Limits over all tenants, and how token limits estimate a request before it runs.
struct RateLimitConfig {
  // Completion tokens reserved for a request that sets no max_tokens (and that a token
  // limit applies to); calibrated to the real count afterwards.
  std::int64_t default_max_tokens = 1024;
  // The same for the tenant, key, tenant x model and model token limits.
  bool end_streams_over_budget = false;
  std::vector<std::pair<std::string, LimitSet>> models;  // per model, every caller together
  std::vector<RateLimitPolicyConfig> policies;           // rate_limits.policies, then RateLimitPolicy resources
};

}  // namespace tahua
