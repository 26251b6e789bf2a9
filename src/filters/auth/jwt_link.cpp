#include "filters/auth/jwt_link.h"

#include <array>
#include <boost/json.hpp>
#include <chrono>
#include <ctime>
#include <vector>

#include "core/json_read.h"
#include "core/log.h"
#include "core/sha256.h"
#include "filters/worker_services.h"
#include "identity/issuer_keys.h"
#include "identity/jwt_verifier.h"
#include "identity/verified_tokens.h"
#include "telemetry/metrics.h"
#include "tenants/key_table.h"

namespace tahua {
namespace {
namespace bj = boost::json;

std::int64_t steadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What one fetch needs, copied: it may outlive the link (a reload) and the config.
struct FetchJob {
  std::shared_ptr<jwt::IssuerKeys> keys;
  std::string name, issuer, jwks_url, discovery_url;
  Millis timeout;
  WorkerServices* services;
  std::array<std::uint64_t, 2>* counts;  // the fetching worker's (succeeded, failed)
};

void finish(const std::shared_ptr<FetchJob>& job, const std::string* jwks, const std::string& error) {
  const std::string why = job->keys->endFetch(jwks, error);
  ++(*job->counts)[why.empty() ? 0 : 1];
  if (!why.empty())
    log::warn("jwt issuer keys not refreshed; the keys already known stay in use",
              {{"issuer", job->name}, {"error", why}, {"keys", job->keys->keys() ? job->keys->keys()->size() : 0}});
}

OutboundRequest getRequest(const HttpUrl& url, Millis timeout) {
  OutboundRequest r;
  r.url = url;
  r.timeout = timeout;
  r.max_response_bytes = jwt::kMaxJwksBytes;
  r.headers.emplace_back("accept", "application/json");
  return r;
}

void fetchJwks(const std::shared_ptr<FetchJob>& job, const std::string& uri) {
  std::string why;
  auto url = parseHttpUrl(uri, &why, true);
  if (!url) return finish(job, nullptr, "jwks_uri " + why);
  job->services->fetch(getRequest(*url, job->timeout), [job](OutboundResponse r) {
    if (r.status != 200) return finish(job, nullptr, r.status ? "JWKS answered " + std::to_string(r.status) : "JWKS: " + r.error);
    finish(job, &r.body, {});
  });
}

// The discovery document, then the JWKS it names (remembered: later refreshes go
// straight to it).
void startFetch(const std::shared_ptr<FetchJob>& job) {
  if (!job->jwks_url.empty()) return fetchJwks(job, job->jwks_url);
  if (std::string known = job->keys->jwksUri(); !known.empty()) return fetchJwks(job, known);
  std::string why;
  auto url = parseHttpUrl(job->discovery_url, &why, true);
  if (!url) return finish(job, nullptr, "discovery_url " + why);
  job->services->fetch(getRequest(*url, job->timeout), [job](OutboundResponse r) {
    if (r.status != 200)
      return finish(job, nullptr, r.status ? "discovery answered " + std::to_string(r.status) : "discovery: " + r.error);
    boost::system::error_code ec;
    const bj::value doc = readJson(r.body, ec);
    const bj::object* o = ec ? nullptr : doc.if_object();
    const bj::value* iss = o ? o->if_contains("issuer") : nullptr;
    const bj::value* uri = o ? o->if_contains("jwks_uri") : nullptr;
    if (!uri || !uri->is_string()) return finish(job, nullptr, "the discovery document has no jwks_uri");
    // OIDC Discovery 4.3: the document must be the configured issuer's own.
    if (!iss || !iss->is_string() || iss->as_string() != job->issuer)
      return finish(job, nullptr, "the discovery document names another issuer");
    job->keys->setJwksUri(std::string(uri->as_string()));
    fetchJwks(job, std::string(uri->as_string()));
  });
}

// Rows of WorkerMetrics::jwt_tokens: cached, verified, then each refusal's reason.
constexpr std::size_t kCached = 0, kVerified = 1, kNoTenant = 12;
constexpr std::size_t resultOf(jwt::Failure f) { return 2 + static_cast<std::size_t>(f); }
static_assert(resultOf(jwt::Failure::MissingClaim) + 1 == kNoTenant && kNoTenant + 1 == WorkerMetrics::kJwtResultCount);

struct Issuer {
  const JwtIssuerConfig* cfg = nullptr;
  std::shared_ptr<jwt::IssuerKeys> keys;
  const TenantConfig* fixed_tenant = nullptr;
  std::array<std::uint64_t, WorkerMetrics::kJwtResultCount>* counts = nullptr;
  std::array<std::uint64_t, 2>* fetches = nullptr;
};

class JwtLink final : public AuthLink {
 public:
  JwtLink(const Config& config, const KeyTable& keys, WorkerServices* services, WorkerMetrics& metrics)
      : keys_(keys), services_(services), cache_(cacheSize(config)), unattributed_(&metrics.jwt_tokens["-"]) {
    for (const auto& c : config.auth.jwt_issuers) {
      Issuer is{&c, jwt::issuerKeys(jwtIssuerIdentity(c)), c.tenant.empty() ? nullptr : keys.tenant(c.tenant),
                &metrics.jwt_tokens[c.name], &metrics.jwt_key_fetches[c.name]};
      issuers_.push_back(std::move(is));
    }
    // The first fetch at config load, on the worker's loop (not this constructor's
    // thread); one worker does it, the others find it in flight or done.
    if (services_)
      for (const auto& is : issuers_)
        if (!is.keys->loaded()) services_->post([job = job(is)] {
            if (!job->keys->loaded() && job->keys->beginFetch(steadyMs(), 0)) startFetch(job);
          });
  }
  std::string_view name() const override { return "jwt"; }

  AuthOutcome check(RequestContext& ctx, Principal& out, AuthContinuation& then) override {
    const std::string_view token = ctx.headers ? presentedKey(*ctx.headers) : std::string_view{};
    if (token.empty() || !jwt::looksLikeJwt(token)) return AuthOutcome::Pass;  // an API key, or nothing
    const Sha256 digest = sha256(token);
    const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
    if (jwt::VerifiedToken* v = cache_.find(digest, now)) {
      if (stillGood(*v)) {
        const Issuer& is = *static_cast<const Issuer*>(v->issuer);
        out.tenant = v->tenant;
        out.caller = v->caller;
        ++(*is.counts)[kCached];
        dueRefresh(is);
        return AuthOutcome::Authenticated;
      }
      cache_.erase(digest);
    }
    return verify(ctx, token, digest, now, out, &then);
  }

 private:
  static std::size_t cacheSize(const Config& config) {
    std::int64_t n = 1;
    for (const auto& c : config.auth.jwt_issuers) n = std::max(n, c.cache_entries);
    return static_cast<std::size_t>(n);
  }

  std::shared_ptr<FetchJob> job(const Issuer& is) const {
    const JwtIssuerConfig& c = *is.cfg;
    return std::make_shared<FetchJob>(FetchJob{is.keys, c.name, c.issuer, c.jwks_url, c.discovery_url, c.fetch_timeout, services_, is.fetches});
  }

  // The periodic refresh, started by a request that finds it due (it does not wait).
  void dueRefresh(const Issuer& is) {
    if (!services_) return;
    const std::int64_t now = steadyMs();
    if (now - is.keys->lastAttemptMs() < is.cfg->refresh_interval.count()) return;
    if (is.keys->beginFetch(now, is.cfg->refresh_interval.count())) startFetch(job(is));
  }

  bool stillGood(jwt::VerifiedToken& v) const {
    const Issuer& is = *static_cast<const Issuer*>(v.issuer);
    const std::uint64_t g = is.keys->generation();
    if (g == v.generation) return true;
    // The keys changed: good while the key that verified it is still listed.
    auto set = is.keys->keys();
    if (!set || !set->contains(v.key)) return false;
    v.generation = g;
    return true;
  }

  // A 401 naming the reason (never the token), counted by issuer and reason.
  AuthOutcome refuse(RequestContext& ctx, const Issuer* is, std::size_t result) {
    ++(*(is ? is->counts : unattributed_))[result];
    ctx.fail(Error{ErrorKind::InvalidApiKey,
                   result == kNoTenant ? std::string("Invalid token (no_tenant): its claims name no tenant of this gateway.")
                                       : std::string(jwt::failureMessage(static_cast<jwt::Failure>(result - 2)))});
    return AuthOutcome::Refused;
  }

  // A token not in the cache: parsed, verified, mapped. `then` set: an unknown kid may
  // wait for a refresh of the keys (the request pauses); null: it is refused.
  AuthOutcome verify(RequestContext& ctx, std::string_view token, const Sha256& digest, std::int64_t now, Principal& out,
                     AuthContinuation* then) {
    jwt::Token t;
    const auto bad = jwt::parse(token, t);
    const Issuer* is = nullptr;
    for (const auto& i : issuers_)
      if (!t.issuer.empty() && i.cfg->issuer == t.issuer) is = &i;
    if (bad && (*bad == jwt::Failure::Malformed || *bad == jwt::Failure::TooLarge))
      return refuse(ctx, is, resultOf(*bad));  // it looked like a JWT: say what is wrong
    if (!is) return AuthOutcome::Pass;  // another issuer's: the next link may know it
    if (bad) return refuse(ctx, is, resultOf(*bad));
    std::shared_ptr<const jwt::KeySet> keys = is->keys->keys();
    if (!keys || !keys->find(t.kid, t.alg)) {
      switch (then ? waitForKeys(ctx, *is, *then) : Refresh::None) {
        case Refresh::Waiting: return AuthOutcome::Pending;
        case Refresh::Ended: return verify(ctx, token, digest, now, out, nullptr);
        case Refresh::None: break;
      }
      return refuse(ctx, is, resultOf(jwt::Failure::UnknownKey));
    }
    const std::int64_t skew = is->cfg->clock_skew.count() / 1000;
    const jwt::Policy policy{is->cfg->issuer, is->cfg->audiences, skew, now};
    const jwt::Key* used = nullptr;
    if (auto f = jwt::verify(t, *keys, policy, &used)) return refuse(ctx, is, resultOf(*f));
    const bj::object& claims = t.claims.as_object();
    auto caller = std::make_shared<CallerIdentity>();
    caller->issuer = is->cfg->name;
    const bj::value* sub = claims.if_contains(is->cfg->subject_claim);
    if (!sub || !sub->is_string() || sub->as_string().empty() || sub->as_string().size() > 256)
      return refuse(ctx, is, resultOf(jwt::Failure::MissingClaim));
    caller->subject = std::string(sub->as_string());
    const TenantConfig* tenant = tenantOf(*is, claims);
    if (!tenant) return refuse(ctx, is, kNoTenant);
    if (!is->cfg->models_claim.empty())
      if (const bj::value* m = claims.if_contains(is->cfg->models_claim)) {
        caller->models_claimed = true;
        auto add = [&](std::string_view name) {
          if (!name.empty() && caller->models.size() < 256) caller->models.emplace_back(name);
        };
        if (m->is_array()) {
          for (const bj::value& v : m->as_array())
            if (v.is_string()) add(v.as_string());
        } else if (m->is_string()) {
          std::string_view s = m->as_string();
          while (!s.empty()) {
            const std::size_t sp = s.find(' ');
            add(s.substr(0, sp));
            s = sp == std::string_view::npos ? std::string_view{} : s.substr(sp + 1);
          }
        }
      }
    jwt::VerifiedToken entry{std::move(caller), tenant, jwt::expiry(t) + skew, is, used, is->keys->generation()};
    out.tenant = tenant;
    out.caller = entry.caller;
    cache_.put(digest, std::move(entry));
    ++(*is->counts)[kVerified];
    dueRefresh(*is);
    return AuthOutcome::Authenticated;
  }

  const TenantConfig* tenantOf(const Issuer& is, const bj::object& claims) const {
    const JwtIssuerConfig& c = *is.cfg;
    if (!c.tenant_claim.empty())
      if (const bj::value* v = claims.if_contains(c.tenant_claim)) {
        // A claim may be a list (groups): its first value that maps wins.
        auto pick = [&](const bj::value& x) -> const TenantConfig* {
          const bj::string* s = x.if_string();
          if (!s) return nullptr;
          if (c.tenants.empty()) return keys_.tenant(*s);
          for (const auto& [value, tenant] : c.tenants)
            if (value == *s) return keys_.tenant(tenant);
          return nullptr;
        };
        if (v->is_array()) {
          for (const bj::value& x : v->as_array())
            if (const TenantConfig* t = pick(x)) return t;
        } else if (const TenantConfig* t = pick(*v)) {
          return t;
        }
      }
    return is.fixed_tenant;
  }

  // Starts (or joins) a refresh of the issuer's keys for a token whose kid is not known,
  // and pauses the request until it ends or the deadline passes (Waiting). None: no
  // refresh may run now (one ran less than min_refresh_interval ago): the caller refuses
  // at once. Ended: another worker's refresh ended meanwhile: look again.
  enum class Refresh { Waiting, Ended, None };
  Refresh waitForKeys(RequestContext& ctx, const Issuer& is, AuthContinuation& then) {
    if (!services_) return Refresh::None;
    if (is.keys->beginFetch(steadyMs(), is.cfg->min_refresh_interval.count())) startFetch(job(is));
    struct Wait {
      bool done = false;
      std::unique_ptr<TimerHandle> timer;
    };
    auto w = std::make_shared<Wait>();
    // Runs once on this worker's thread: the fetch ended, or the deadline passed.
    // Before the request ends, `this` (its chain's link) is alive.
    auto resume = [this, w, &ctx, &then] {
      if (w->done) return;
      w->done = true;
      w->timer.reset();
      const std::string_view token = presentedKey(*ctx.headers);
      then.linkDone(ctx, verify(ctx, token, sha256(token), static_cast<std::int64_t>(std::time(nullptr)), ctx.principal, nullptr));
    };
    WorkerServices* svc = services_;
    if (!is.keys->whenFetched([svc, resume] { svc->post(resume); }))
      return is.keys->lastAttemptMs() == 0 ? Refresh::None : Refresh::Ended;
    w->timer = services_->runAfter(is.cfg->deadline, resume);
    return Refresh::Waiting;
  }

  const KeyTable& keys_;
  WorkerServices* services_;
  std::vector<Issuer> issuers_;
  jwt::VerifiedTokens cache_;
  std::array<std::uint64_t, WorkerMetrics::kJwtResultCount>* unattributed_;  // malformed, issuer unknown
};

}  // namespace

std::string jwtIssuerIdentity(const JwtIssuerConfig& issuer) {
  return issuer.issuer + "\n" + issuer.jwks_url + "\n" + issuer.discovery_url;
}

std::unique_ptr<AuthLink> makeJwtLink(const Config& config, const KeyTable& keys, WorkerServices* services, WorkerMetrics& metrics) {
  return std::make_unique<JwtLink>(config, keys, services, metrics);
}

}  // namespace tahua
