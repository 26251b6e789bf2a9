#include "filters/models/models_filter.h"

#include <boost/json.hpp>

namespace tahua {
namespace {

// GET /v1/models in the shape of the client's SDK: Anthropic's SDK always sends an
// `anthropic-version` header and expects {data:[{type:"model",...}],has_more,...};
// everyone else gets OpenAI's {object:"list",data:[...]}.
class ModelsFilter final : public Filter {
 public:
  std::string_view name() const override { return "models"; }

  FilterStatus onRequestHeaders(RequestContext& ctx) override {
    if (ctx.endpoint != Endpoint::Models) return FilterStatus::Continue;
    // The lists only change with the config; build them once per snapshot.
    if (cached_for_ != ctx.config.get()) {
      boost::json::array openai, anthropic;
      for (const auto& m : ctx.config->models) {
        openai.push_back(boost::json::object{{"id", m.name}, {"object", "model"}, {"created", 0}, {"owned_by", m.deployments.front().provider}});
        anthropic.push_back(boost::json::object{
            {"type", "model"}, {"id", m.name}, {"display_name", m.name}, {"created_at", "1970-01-01T00:00:00Z"}});
      }
      const bool empty = ctx.config->models.empty();
      openai_ = boost::json::serialize(boost::json::object{{"object", "list"}, {"data", std::move(openai)}});
      anthropic_ = boost::json::serialize(boost::json::object{
          {"data", std::move(anthropic)},
          {"has_more", false},
          {"first_id", empty ? boost::json::value(nullptr) : boost::json::value(ctx.config->models.front().name)},
          {"last_id", empty ? boost::json::value(nullptr) : boost::json::value(ctx.config->models.back().name)}});
      cached_for_ = ctx.config.get();
    }
    const bool anthropic_client = ctx.headers && !ctx.headers->get("anthropic-version").empty();
    ctx.local_reply = LocalReply{200, anthropic_client ? anthropic_ : openai_, "application/json"};
    return FilterStatus::Stop;
  }

 private:
  const Config* cached_for_ = nullptr;
  std::string openai_;
  std::string anthropic_;
};

}  // namespace

std::unique_ptr<Filter> makeModelsFilter() { return std::make_unique<ModelsFilter>(); }

}  // namespace tahua
