#include "filters/balancer/balancer_filter.h"

#include <algorithm>
#include <charconv>

#include "http/query.h"
#include <vector>

namespace tahua {

DeploymentState& DeploymentStates::get(std::string_view model, std::string_view id) {
  std::string key;
  key.reserve(model.size() + id.size() + 1);
  key.append(model).append("/").append(id);
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (used_ == kChunk) {
      chunks_.push_back(std::make_unique<DeploymentState[]>(kChunk));
      used_ = 0;
    }
    it = map_.emplace(std::move(key), &chunks_.back()[used_++]).first;
  }
  return *it->second;
}

std::vector<std::string> DeploymentStates::draining(const Config& config) const {
  std::vector<std::string> out;
  for (const auto& [key, state] : map_) {
    if (state->outstanding == 0) continue;
    const auto slash = key.find('/');
    const ModelConfig* m = config.findModel(std::string_view(key).substr(0, slash));
    const std::string_view id = std::string_view(key).substr(slash + 1);
    if (!m || std::none_of(m->deployments.begin(), m->deployments.end(), [&](const DeploymentConfig& d) { return d.id == id; }))
      out.push_back(key);
  }
  return out;
}

const DeploymentState* DeploymentStates::find(std::string_view model, std::string_view id) const {
  std::string key;
  key.append(model).append("/").append(id);
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : it->second;
}

namespace {

// A header name against a lower-case one of letters and '-' (ASCII case folding; the
// length first, so most headers are passed over at once).
bool iequals(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (std::size_t i = 0; i < lower.size(); ++i)
    if ((s[i] | 0x20) != lower[i]) return false;
  return true;
}

bool parseNumber(std::string_view v, double& out) {
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc{} && end != v.data();
}

class BalancerFilter final : public Filter {
 public:
  BalancerFilter(DeploymentStates& states, const Config& config, const NodeTablePtr& nodes, Balancer& balancer)
      : nodes_(nodes), balancer_(balancer) {
    // Resolve every deployment's state slot once per config snapshot.
    states_.resize(config.deployment_count);
    for (const auto& m : config.models)
      for (const auto& d : m.deployments) states_[d.index] = &states.get(m.name, d.id);
    for (const auto& m : config.files.targets)  // files and batches: their provider
      for (const auto& d : m.deployments) states_[d.index] = &states.get(m.name, d.id);
    for (const auto& m : config.mcp.targets)  // MCP servers
      for (const auto& d : m.deployments) states_[d.index] = &states.get(m.name, d.id);
  }

  std::string_view name() const override { return "balancer"; }

  FilterStatus onUpstreamSelect(RequestContext& ctx) override { return select(ctx); }
  FilterStatus onReselect(RequestContext& ctx) override { return select(ctx); }

  // A failed attempt is a finished call of its deployment; the next pick avoids it.
  void onAttemptFailed(RequestContext& ctx) override {
    if (ctx.deployment) ctx.tried.push_back(ctx.deployment->index);
    finish(ctx);
    ctx.deployment_state = nullptr;
  }

  void onComplete(RequestContext& ctx) override { finish(ctx); }

 private:
  FilterStatus select(RequestContext& ctx) {
    if (!ctx.model) return FilterStatus::Continue;
    const ModelConfig& model = *ctx.model;
    PickRequest req;
    req.model = &model;
    req.states = std::span<DeploymentState* const>(states_.data() + model.deployments.front().index, model.deployments.size());
    req.nodes = nodes_.get();
    if (model.balancing == BalancePolicy::GpuAware && req.nodes) {
      if (resolved_.get() != req.nodes) resolveNodes(*ctx.config);
      req.node_status = std::span<const NodeStatus* const>(node_status_.data() + model.deployments.front().index,
                                                            model.deployments.size());
    }
    req.now = SteadyClock::now();
    req.exclude = ctx.tried;
    if (ctx.headers) {
      req.pin_version = ctx.headers->get("x-tahua-version");
      if (req.pin_version.empty()) req.pin_version = queryParam(ctx.query, "modelVersion").value_or(std::string_view{});
      if (model.canary.enabled)
        req.sticky_key = model.canary.sticky_by_tenant ? (ctx.principal.tenant ? std::string_view(ctx.principal.tenant->name) : std::string_view{})
                                                       : stickyKey(*ctx.headers, model.canary);
    }
    const PickResult pick = balancer_.pick(req);
    const DeploymentConfig& d = model.deployments[pick.index];
    ctx.deployment = &d;
    ctx.provider = &ctx.config->providers[d.provider_index];
    ctx.route_reason = pick.reason;
    if (!ctx.provider->usable) {
      ctx.fail(Error{ErrorKind::ProviderUnavailable,
                     "The provider for model '" + model.name + "' is not configured (missing API key)."});
      return FilterStatus::Stop;
    }
    DeploymentState* s = req.states[pick.index];
    ++s->outstanding;
    ctx.deployment_state = s;
    return FilterStatus::Continue;
  }


 public:
  // Rate-limit-aware weights: when the provider reports its request budget nearly used
  // (x-ratelimit-remaining-requests / anthropic-ratelimit-requests-remaining against the
  // limit), the deployment's weight shrinks before it starts answering 429.
  // The provider's own request limit, as it reports it (read before the rate-limit
  // filter puts the caller's limits in those headers).
  void onUpstreamHeaders(const RequestContext& ctx) override {
    if (!ctx.deployment_state || !ctx.response_headers) return;
    double remaining = -1, limit = -1;
    for (const auto& [name, value] : *ctx.response_headers) {
      if (iequals(name, "x-ratelimit-remaining-requests") || iequals(name, "anthropic-ratelimit-requests-remaining"))
        parseNumber(value, remaining);
      else if (iequals(name, "x-ratelimit-limit-requests") || iequals(name, "anthropic-ratelimit-requests-limit"))
        parseNumber(value, limit);
    }
    if (remaining >= 0 && limit > 0) {
      const double left = remaining / limit;
      // Full weight above 10% left, then down to 5% of it.
      ctx.deployment_state->throttle = left >= 0.1 ? 1.0 : std::max(0.05, left * 10);
    }
  }

  // Accounts for the call of ctx.deployment_state that just ended (final or failed attempt).
  void finish(RequestContext& ctx) {
    DeploymentState* s = ctx.deployment_state;
    if (!s) return;
    --s->outstanding;
    const auto now = SteadyClock::now();
    if (ctx.status == 429) {
      // The provider asked us to back off: no traffic until Retry-After (1 s if unsaid).
      double seconds = 1;
      if (ctx.upstream_retry_after > 0) seconds = ctx.upstream_retry_after;
      s->throttled_until = now + std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
      return;
    }
    if (ctx.status == 499) return;  // the client left: says nothing about the upstream
    const bool failure = (ctx.error && ctx.error->source() == ErrorSource::Upstream) || ctx.status >= 500;
    if (!failure && ctx.first_byte) recordLatency(*s, std::chrono::duration<double, std::milli>(*ctx.first_byte - ctx.start).count(), now);
    if (ctx.model) recordOutcome(*s, ctx.model->outlier, failure, now);
  }

 private:
  static std::string_view stickyKey(const HeaderView& h, const CanaryConfig& c) {
    if (!c.sticky_header.empty()) return h.get(c.sticky_header);
    std::string_view auth = h.get("authorization");
    if (auth.size() > 7 && iequals(auth.substr(0, 7), "bearer ")) return auth.substr(7);
    return h.get("x-api-key");
  }

  // Node status per deployment, looked up once per published node table.
  void resolveNodes(const Config& config) {
    resolved_ = nodes_;  // keeps the table (and the pointers into it) alive
    node_status_.assign(config.deployment_count, nullptr);
    for (const auto& m : config.models)
      for (const auto& d : m.deployments)
        if (auto it = resolved_->find(d.node); it != resolved_->end()) node_status_[d.index] = &it->second;
  }

  std::vector<DeploymentState*> states_;
  NodeTablePtr resolved_;
  std::vector<const NodeStatus*> node_status_;
  const NodeTablePtr& nodes_;  // the worker's current table (replaced on its own thread)
  Balancer& balancer_;
};

}  // namespace

std::unique_ptr<Filter> makeBalancerFilter(DeploymentStates& states, const Config& config, const NodeTablePtr& nodes,
                                           Balancer& balancer) {
  return std::make_unique<BalancerFilter>(states, config, nodes, balancer);
}

}  // namespace tahua
