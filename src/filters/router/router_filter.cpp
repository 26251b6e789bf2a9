#include "filters/router/router_filter.h"

namespace tahua {
namespace {

class RouterFilter final : public Filter {
 public:
  std::string_view name() const override { return "router"; }

  FilterStatus onRequestBody(RequestContext& ctx) override {
    if (ctx.endpoint == Endpoint::Models || ctx.endpoint == Endpoint::None) return FilterStatus::Continue;
    auto inspected = inspectRequest(ctx.body);
    if (auto* err = std::get_if<Error>(&inspected)) {
      ctx.fail(std::move(*err));
      return FilterStatus::Stop;
    }
    ctx.facts = std::move(std::get<RequestFacts>(inspected));
    if (ctx.endpoint == Endpoint::Embeddings) ctx.facts.stream = false;  // embeddings never stream
    return FilterStatus::Continue;
  }

  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    if (ctx.endpoint == Endpoint::Models || ctx.endpoint == Endpoint::None) return FilterStatus::Continue;
    const ModelConfig* model = ctx.config->findModel(ctx.facts.model);
    if (!model) {
      ctx.fail(Error{ErrorKind::ModelNotFound,
                     "The model '" + ctx.facts.model + "' does not exist or you do not have access to it."});
      return FilterStatus::Stop;
    }
    ctx.model = model;  // the balancer filter picks one of its deployments
    return FilterStatus::Continue;
  }
};

}  // namespace

std::unique_ptr<Filter> makeRouterFilter() { return std::make_unique<RouterFilter>(); }

}  // namespace tahua
