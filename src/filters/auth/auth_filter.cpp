#include "filters/auth/auth_filter.h"

#include <ctime>
#include <vector>

#include "filters/auth/auth_link.h"
#include "filters/auth/jwt_link.h"
#include "telemetry/metrics.h"
#include "tenants/key_table.h"

namespace tahua {
namespace {

bool iequalsPrefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if ((s[i] | 0x20) != prefix[i]) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

class ApiKeyLink final : public AuthLink {
 public:
  explicit ApiKeyLink(const KeyTable& keys) : keys_(keys) {}
  std::string_view name() const override { return "api_key"; }

  AuthOutcome check(RequestContext& ctx, Principal& out, AuthContinuation&) override {
    const std::string_view key = ctx.headers ? presentedKey(*ctx.headers) : std::string_view{};
    if (key.empty()) return AuthOutcome::Pass;
    const ApiKeyConfig* k = keys_.findPresented(key);
    // The message never echoes the key: access logs and client-side logs keep it.
    if (!k) {
      ctx.fail(Error{ErrorKind::InvalidApiKey, "Invalid API key."});
      return AuthOutcome::Refused;
    }
    if (k->expires_at != 0 && static_cast<std::int64_t>(std::time(nullptr)) >= k->expires_at) {
      ctx.fail(Error{ErrorKind::InvalidApiKey, "This API key has expired."});
      return AuthOutcome::Refused;
    }
    out.key = k;
    out.tenant = keys_.tenant(k->tenant);
    return AuthOutcome::Authenticated;
  }

 private:
  const KeyTable& keys_;
};

class AnonymousLink final : public AuthLink {
 public:
  explicit AnonymousLink(const TenantConfig& tenant) : tenant_(tenant) {}
  std::string_view name() const override { return "anonymous"; }
  AuthOutcome check(RequestContext&, Principal& out, AuthContinuation&) override {
    out.tenant = &tenant_;
    return AuthOutcome::Authenticated;
  }

 private:
  const TenantConfig& tenant_;
};

struct Chain {
  const AuthChainConfig* config = nullptr;  // null: the default chain (the key check alone)
  std::vector<std::unique_ptr<AuthLink>> links;
};

struct AuthState {
  const Chain* chain = nullptr;
  std::size_t next = 0;  // the link that answered Pending
};

class AuthFilter final : public FilterWithState<AuthState>, AuthContinuation {
 public:
  AuthFilter(const Config& config, TenantDirectoryPtr directory, WorkerMetrics& metrics, const PluginLinkFactory& plugin_link,
             WorkerServices* services)
      : keys_(std::move(directory)), metrics_(metrics) {
    for (const auto& c : config.auth.chains) {
      Chain chain{&c, {}};
      for (const auto& l : c.links) {
        switch (l.type) {
          case AuthLinkConfig::Type::ApiKey: chain.links.push_back(makeApiKeyLink(keys_)); break;
          case AuthLinkConfig::Type::Anonymous:
            if (const TenantConfig* t = keys_.tenant(l.tenant)) chain.links.push_back(makeAnonymousLink(*t));
            break;
          case AuthLinkConfig::Type::Plugin:
            // No plugins configured at all: the link is left out, so it passes (the next
            // link decides; a request that no link admits is still refused).
            if (plugin_link) chain.links.push_back(plugin_link(l.plugin, keys_));
            break;
          case AuthLinkConfig::Type::Jwt: chain.links.push_back(makeJwtLink(config, keys_, services, metrics_)); break;
        }
      }
      chains_.push_back(std::move(chain));
    }
    fallback_.links.push_back(makeApiKeyLink(keys_));
  }
  std::string_view name() const override { return "auth"; }

  FilterStatus onRequestHeaders(RequestContext& ctx) override {
    if (!ctx.config->auth.enabled) return FilterStatus::Continue;
    AuthState& st = state(ctx);
    st.chain = &match(ctx);
    return runLinks(ctx, st, 0);
  }

  void linkDone(RequestContext& ctx, AuthOutcome outcome) override {
    AuthState& st = state(ctx);
    FilterStatus s = FilterStatus::Continue;
    switch (outcome) {
      case AuthOutcome::Authenticated: break;
      case AuthOutcome::Refused: s = refused(ctx); break;
      case AuthOutcome::Pending:  // not an answer: treated as a pass
      case AuthOutcome::Pass:
        s = runLinks(ctx, st, st.next + 1);
        if (s == FilterStatus::Pause) return;
        break;
    }
    ctx.resumer->resume(s);
  }

 private:
  FilterStatus runLinks(RequestContext& ctx, AuthState& st, std::size_t from) {
    const auto& links = st.chain->links;
    for (std::size_t i = from; i < links.size(); ++i) {
      // Before the call: a link may answer through linkDone before check() returns
      // (a plugin whose store read was answered at once), and that goes on from here.
      st.next = i;
      switch (links[i]->check(ctx, ctx.principal, *this)) {
        case AuthOutcome::Authenticated: return FilterStatus::Continue;
        case AuthOutcome::Refused: return refused(ctx);
        case AuthOutcome::Pending: return FilterStatus::Pause;
        case AuthOutcome::Pass: break;
      }
    }
    ctx.fail(Error{ErrorKind::MissingApiKey,
                   "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'."});
    return refused(ctx);
  }

  const Chain& match(const RequestContext& ctx) const {
    for (const auto& c : chains_) {
      const AuthChainConfig& m = *c.config;
      if (!m.path_prefix.empty() && ctx.path.substr(0, m.path_prefix.size()) != m.path_prefix) continue;
      bool ok = true;
      for (const auto& [name, value] : m.headers) {
        const std::string_view got = ctx.headers ? ctx.headers->get(name) : std::string_view{};
        ok = ok && (value == "*" ? !got.empty() : got == value);
      }
      if (ok) return c;
    }
    return fallback_;
  }

  FilterStatus refused(RequestContext& ctx) {
    const std::string_view code = ctx.error->code();
    auto it = metrics_.auth_failures.find(code);
    if (it == metrics_.auth_failures.end()) metrics_.auth_failures.emplace(std::string(code), 1);
    else ++it->second;
    return FilterStatus::Stop;
  }

  KeyTable keys_;  // this worker's
  WorkerMetrics& metrics_;
  std::vector<Chain> chains_;
  Chain fallback_;
};

class ModelAccessFilter final : public Filter {
 public:
  std::string_view name() const override { return "model_access"; }
  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    // An MCP server is not a model: mcp.access says who may use what (filters/mcp/).
    if (!ctx.model || mcpEndpoint(ctx.endpoint) || ctx.principal.allows(ctx.model->name)) return FilterStatus::Continue;
    ctx.fail(Error{ErrorKind::ModelNotAllowed, "This API key may not use the model '" + ctx.model->name + "'."});
    return FilterStatus::Stop;
  }
};

}  // namespace

std::string_view presentedKey(const HeaderView& headers) {
  // A Bearer token first; another Authorization scheme (Basic from a proxy in front)
  // is not a key, and the key headers are still looked at.
  if (std::string_view auth = headers.get("authorization"); iequalsPrefix(auth, "bearer ")) return trim(auth.substr(7));
  if (auto k = trim(headers.get("x-api-key")); !k.empty()) return k;
  if (auto k = trim(headers.get("api-key")); !k.empty()) return k;
  // A browser cannot set headers on a WebSocket: the Realtime SDK sends the key as a
  // subprotocol, "openai-insecure-api-key.<key>", among others.
  std::string_view protocols = headers.get("sec-websocket-protocol");
  static constexpr std::string_view kKeyProtocol = "openai-insecure-api-key.";
  while (!protocols.empty()) {
    const auto comma = protocols.find(',');
    const std::string_view p = trim(protocols.substr(0, comma));
    if (p.size() > kKeyProtocol.size() && p.substr(0, kKeyProtocol.size()) == kKeyProtocol) return p.substr(kKeyProtocol.size());
    if (comma == std::string_view::npos) break;
    protocols.remove_prefix(comma + 1);
  }
  return {};
}

std::unique_ptr<AuthLink> makeApiKeyLink(const KeyTable& keys) { return std::make_unique<ApiKeyLink>(keys); }
std::unique_ptr<AuthLink> makeAnonymousLink(const TenantConfig& tenant) { return std::make_unique<AnonymousLink>(tenant); }

std::unique_ptr<Filter> makeAuthFilter(const Config& config, TenantDirectoryPtr directory, WorkerMetrics& metrics,
                                       const PluginLinkFactory& plugin_link, WorkerServices* services) {
  return std::make_unique<AuthFilter>(config, std::move(directory), metrics, plugin_link, services);
}
std::unique_ptr<Filter> makeModelAccessFilter() { return std::make_unique<ModelAccessFilter>(); }

}  // namespace tahua
