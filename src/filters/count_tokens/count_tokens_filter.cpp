#include "filters/count_tokens/count_tokens_filter.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "core/json_read.h"
#include "tokens/token_estimator.h"

namespace tahua {
namespace {

class CountTokensFilter final : public Filter {
 public:
  std::string_view name() const override { return "count_tokens"; }

  // Runs after the router chose the model.
  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    if (ctx.endpoint != Endpoint::CountTokens) return FilterStatus::Continue;
    if (ctx.provider && ctx.provider->type == "anthropic") return FilterStatus::Continue;
    boost::system::error_code ec;
    boost::json::value v = readJson(ctx.body, ec);
    if (ec || !v.is_object()) {
      ctx.fail(Error{ErrorKind::InvalidJson, "The request body is not a JSON object."});
      return FilterStatus::Stop;
    }
    const auto* messages = v.get_object().if_contains("messages");
    if (!messages || !messages->is_array()) {
      ctx.fail(Error{ErrorKind::InvalidRequest, "messages: Field required"});
      return FilterStatus::Stop;
    }
    const std::int64_t tokens = estimateAnthropicTokens(v.get_object());
    ctx.local_reply = LocalReply{200, boost::json::serialize(boost::json::object{{"input_tokens", tokens}})};
    return FilterStatus::Stop;
  }
};

}  // namespace

std::unique_ptr<Filter> makeCountTokensFilter() { return std::make_unique<CountTokensFilter>(); }

}  // namespace tahua
