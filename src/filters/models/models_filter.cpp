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
      openai_ = render(*ctx.config, false, nullptr);
      anthropic_ = render(*ctx.config, true, nullptr);
      cached_for_ = ctx.config.get();
    }
    const bool anthropic_client = ctx.headers && !ctx.headers->get("anthropic-version").empty();
    // A key or tenant limited to some models sees only those (built per request: rare).
    if (ctx.principal.restricted()) {
      ctx.local_reply = LocalReply{200, render(*ctx.config, anthropic_client, &ctx.principal), "application/json"};
      return FilterStatus::Stop;
    }
    ctx.local_reply = LocalReply{200, anthropic_client ? anthropic_ : openai_, "application/json"};
    return FilterStatus::Stop;
  }

 private:
  // The list in the client's API shape; with `who`, only the models it may use.
  static std::string render(const Config& config, bool anthropic, const Principal* who) {
    boost::json::array data;
    std::string_view first, last;
    for (const auto& m : config.models) {
      if (who && !who->allows(m.name)) continue;
      if (first.empty()) first = m.name;
      last = m.name;
      if (anthropic)
        data.push_back(boost::json::object{
            {"type", "model"}, {"id", m.name}, {"display_name", m.name}, {"created_at", "1970-01-01T00:00:00Z"}});
      else
        data.push_back(boost::json::object{{"id", m.name}, {"object", "model"}, {"created", 0}, {"owned_by", m.deployments.front().provider}});
    }
    if (!anthropic) return boost::json::serialize(boost::json::object{{"object", "list"}, {"data", std::move(data)}});
    return boost::json::serialize(boost::json::object{
        {"data", std::move(data)},
        {"has_more", false},
        {"first_id", first.empty() ? boost::json::value(nullptr) : boost::json::value(first)},
        {"last_id", last.empty() ? boost::json::value(nullptr) : boost::json::value(last)}});
  }

  const Config* cached_for_ = nullptr;
  std::string openai_;
  std::string anthropic_;
};

}  // namespace

std::unique_ptr<Filter> makeModelsFilter() { return std::make_unique<ModelsFilter>(); }

}  // namespace tahua
