#include "filters/models/models_filter.h"

#include <boost/json.hpp>

namespace tahua {
namespace {

class ModelsFilter final : public Filter {
 public:
  std::string_view name() const override { return "models"; }

  FilterStatus onRequestHeaders(RequestContext& ctx) override {
    if (ctx.endpoint != Endpoint::Models) return FilterStatus::Continue;
    // The list only changes with the config; build it once per snapshot.
    if (cached_for_ != ctx.config.get()) {
      boost::json::array data;
      for (const auto& m : ctx.config->models) {
        data.push_back(boost::json::object{{"id", m.name}, {"object", "model"}, {"created", 0}, {"owned_by", m.provider}});
      }
      cached_ = boost::json::serialize(boost::json::object{{"object", "list"}, {"data", std::move(data)}});
      cached_for_ = ctx.config.get();
    }
    ctx.local_reply = LocalReply{200, cached_, "application/json"};
    return FilterStatus::Stop;
  }

 private:
  const Config* cached_for_ = nullptr;
  std::string cached_;
};

}  // namespace

std::unique_ptr<Filter> makeModelsFilter() { return std::make_unique<ModelsFilter>(); }

}  // namespace tahua
