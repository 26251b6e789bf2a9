// The auth-chain link `{type: jwt}`: callers who sign in with their company's identity
// provider present its JWT as the bearer token (`Authorization: Bearer`, or an SDK's
// API key). A token of one of `auth.jwt_issuers` is verified against the issuer's keys
// (identity/jwt_verifier.h), its claims give the tenant, the caller (subject) and
// optionally the models; a token of another issuer, or no JWT at all, passes to the
// next link; a bad one is 401 naming the reason (never echoing the token).
//
// Keys: fetched from the issuer's discovery document or jwks_url through the worker's
// outbound client (WorkerServices::fetch), first when the link is made (config load),
// then every refresh_interval (started by a request that finds it due; it does not
// wait), and when a token names an unknown kid (at most once per min_refresh_interval:
// that request waits for the fetch, at most `deadline`, then 401 unknown_key). The key
// set is shared by every worker and survives reloads; a failed fetch keeps it.
// Verified tokens are cached per worker (identity/verified_tokens.h).
#pragma once

#include <memory>
#include <string>

#include "filters/auth/auth_link.h"

namespace tahua {

class WorkerServices;
struct JwtIssuerConfig;
struct WorkerMetrics;

// `services` null (harnesses without an event loop): keys are only what is installed in
// jwt::issuerKeys(jwtIssuerIdentity(issuer)); an unknown kid is refused at once.
// Counts tokens and key fetches in `metrics` (tahua_jwt_tokens_total{issuer,result},
// tahua_jwt_key_fetches_total{issuer,outcome}).
std::unique_ptr<AuthLink> makeJwtLink(const Config& config, const KeyTable& keys, WorkerServices* services, WorkerMetrics& metrics);

// The name the issuer's shared key set is kept under (issuer and where its keys are).
std::string jwtIssuerIdentity(const JwtIssuerConfig& issuer);

}  // namespace tahua
