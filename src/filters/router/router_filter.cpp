#include "filters/router/router_filter.h"

#include <random>

#include <fnmatch.h>

#include <boost/json/parse.hpp>

#include <chrono>

#include "http/query.h"
#include "tokens/token_estimator.h"

namespace tahua {
namespace {

// What cost-aware route conditions look at, computed at most once per request and only
// when a candidate route asks (a DOM parse and a token estimate are not free).
struct Features {
  bool computed = false;
  std::int64_t prompt_tokens = 0;
  bool has_tools = false;
};

void computeFeatures(const RequestContext& ctx, Features& f) {
  f.computed = true;
  boost::system::error_code ec;
  boost::json::parse_options depth;
  depth.max_depth = ctx.config->server.max_json_depth;  // as deep as the router lets bodies be
  boost::json::value v = boost::json::parse(ctx.body, ec, {}, depth);
  if (ec || !v.is_object()) {
    f.prompt_tokens = static_cast<std::int64_t>(ctx.body.size() / 4);
    return;
  }
  const auto& o = v.get_object();
  const auto* tools = o.if_contains("tools");
  f.has_tools = tools && tools->is_array() && !tools->get_array().empty();
  if (ctx.endpoint == Endpoint::Messages) f.prompt_tokens = estimateAnthropicTokens(o);
  else if (ctx.endpoint == Endpoint::ChatCompletions) f.prompt_tokens = estimateChatTokens(o);
  else f.prompt_tokens = defaultTokenCounter().count(ctx.body);  // completions, responses: the text as a whole
}

int utcMinuteOfDay() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<int>(std::chrono::duration_cast<std::chrono::minutes>(now).count() % 1440);
}

bool routeMatches(const RouteConfig& r, const RequestContext& ctx, const std::string& model, bool configured, Features& f) {
  if (configured && !r.override_model) return false;  // the client's explicit choice wins
  if (!r.models.empty() || !r.model_globs.empty()) {
    bool hit = std::find(r.models.begin(), r.models.end(), model) != r.models.end();
    for (std::size_t i = 0; !hit && i < r.model_globs.size(); ++i) hit = ::fnmatch(r.model_globs[i].c_str(), model.c_str(), 0) == 0;
    if (!hit) return false;
  }
  if (!r.path.empty() && r.path != ctx.path) return false;
  if (!r.tenants.empty() &&
      (!ctx.principal.tenant || std::find(r.tenants.begin(), r.tenants.end(), ctx.principal.tenant->name) == r.tenants.end()))
    return false;
  if (!r.keys.empty() && (!ctx.principal.key || std::find(r.keys.begin(), r.keys.end(), ctx.principal.key->name) == r.keys.end()))
    return false;
  for (const auto& [name, value] : r.headers) {
    std::string_view got = ctx.headers ? ctx.headers->get(name) : std::string_view{};
    if (value == "*" ? got.empty() : got != value) return false;
  }
  for (const auto& [name, value] : r.query) {
    if (queryParam(ctx.query, name) != value) return false;
  }
  if (r.from_minute >= 0) {
    const int now = utcMinuteOfDay();
    const bool inside = r.from_minute < r.to_minute ? (now >= r.from_minute && now < r.to_minute)
                                                    : (now >= r.from_minute || now < r.to_minute);  // wraps midnight
    if (!inside) return false;
  }
  if (r.needsFeatures()) {
    if (!f.computed) computeFeatures(ctx, f);
    if (r.min_prompt_tokens >= 0 && f.prompt_tokens < r.min_prompt_tokens) return false;
    if (r.max_prompt_tokens >= 0 && f.prompt_tokens > r.max_prompt_tokens) return false;
    if (r.has_tools >= 0 && f.has_tools != (r.has_tools == 1)) return false;
  }
  return true;
}

// First matching route in config order: the routes naming this model exactly and the
// model-agnostic / glob ones are walked as two sorted lists, merged.
const RouteConfig* firstRoute(const Config& cfg, const RequestContext& ctx, const std::string& model, bool configured) {
  static const std::vector<std::uint32_t> kNone;
  auto it = cfg.routes_by_model.find(model);
  const std::vector<std::uint32_t>& exact = it == cfg.routes_by_model.end() ? kNone : it->second;
  const std::vector<std::uint32_t>& any = cfg.routes_any_model;
  Features features;
  std::size_t a = 0, b = 0;
  while (a < exact.size() || b < any.size()) {
    std::uint32_t next;
    if (b >= any.size() || (a < exact.size() && exact[a] < any[b])) next = exact[a++];
    else if (a < exact.size() && exact[a] == any[b]) next = (++a, any[b++]);
    else next = any[b++];
    const RouteConfig& r = cfg.routes[next];
    if (routeMatches(r, ctx, model, configured, features)) return &r;
  }
  return nullptr;
}

class RouterFilter final : public Filter {
 public:
  std::string_view name() const override { return "router"; }
  RouterFilter() : rng_(std::random_device{}()) {}

  // Files and batches name no model: the files filter routes them; MCP messages the mcp filter.
  static bool modelless(Endpoint e) { return e == Endpoint::Models || e == Endpoint::None || fileEndpoint(e) || mcpEndpoint(e); }

  FilterStatus onRequestBody(RequestContext& ctx) override {
    if (modelless(ctx.endpoint)) return FilterStatus::Continue;
    auto inspected = inspectRequest(ctx.body, ctx.config->server.max_json_depth);
    if (auto* err = std::get_if<Error>(&inspected)) {
      ctx.fail(std::move(*err));
      return FilterStatus::Stop;
    }
    ctx.facts = std::move(std::get<RequestFacts>(inspected));
    if (oneShotEndpoint(ctx.endpoint)) ctx.facts.stream = false;  // embeddings, moderations, images, rerank never stream
    return FilterStatus::Continue;
  }

  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    if (modelless(ctx.endpoint)) return FilterStatus::Continue;
    const Config& cfg = *ctx.config;
    const ModelConfig* model = cfg.findModel(ctx.facts.model);
    if (!cfg.routes.empty()) {
      if (const RouteConfig* r = firstRoute(cfg, ctx, ctx.facts.model, model != nullptr)) {
        model = &cfg.models[r->target_index];
        ctx.route_name = r->name;
        ctx.route = r;
      }
    }
    if (!model) {
      ctx.fail(Error{ErrorKind::ModelNotFound,
                     "The model '" + ctx.facts.model + "' does not exist or you do not have access to it."});
      return FilterStatus::Stop;
    }
    if (model->shift_percent > 0 && !model->fallback_indices.empty() &&
        (model->shift_percent >= 100 || std::uniform_real_distribution<double>(0, 100)(rng_) < model->shift_percent)) {
      // A self-healing rule moved (this share of) the model's traffic to its first fallback.
      ctx.requested_model = model;  // failover goes on from its second fallback
      ctx.fallback = "shift";
      model = &cfg.models[model->fallback_indices[0]];
    }
    ctx.model = model;  // the balancer filter picks one of its deployments
    return FilterStatus::Continue;
  }

 private:
  std::minstd_rand rng_;  // per worker (filters are), so no sharing
};

}  // namespace

std::unique_ptr<Filter> makeRouterFilter() { return std::make_unique<RouterFilter>(); }

}  // namespace tahua
