#include "filters/access_log/access_log_filter.h"

#include <boost/json.hpp>

#include "core/log.h"

namespace tahua {
namespace {

std::string_view apiName(Endpoint e) {
  switch (e) {
    case Endpoint::Messages:
    case Endpoint::CountTokens: return "anthropic";
    case Endpoint::Responses: return "openai-responses";
    default: return "openai";
  }
}

class AccessLogFilter final : public Filter {
 public:
  explicit AccessLogFilter(AccessLogSink& sink) : sink_(sink) {}
  std::string_view name() const override { return "access_log"; }

  void onComplete(RequestContext& ctx) override {
    using namespace std::chrono;
    boost::json::object line;
    line.reserve(18);
    line["ts"] = log::nowRfc3339();
    line["request_id"] = ctx.request_id;
    line["method"] = ctx.method;
    line["path"] = ctx.path;
    line["model"] = ctx.model ? boost::json::value(ctx.model->name)
                              : (ctx.facts.model.empty() ? boost::json::value(nullptr) : boost::json::value(ctx.facts.model));
    line["provider"] = ctx.provider ? boost::json::value(ctx.provider->name) : boost::json::value(nullptr);
    line["deployment"] = ctx.deployment ? boost::json::value(ctx.deployment->id) : boost::json::value(nullptr);
    line["version"] = ctx.deployment ? boost::json::value(ctx.deployment->version) : boost::json::value(nullptr);
    if (ctx.deployment && !ctx.deployment->address.empty()) line["upstream_address"] = ctx.deployment->address;  // a discovered endpoint
    if (!ctx.route_reason.empty()) line["route"] = ctx.route_reason;
    if (!ctx.route_name.empty()) line["route_name"] = ctx.route_name;
    // Who called: the tenant, the key's name and its display prefix (never the key).
    if (ctx.principal.tenant) line["tenant"] = ctx.principal.tenant->name;
    if (ctx.principal.key) {
      line["key"] = ctx.principal.key->name;
      if (!ctx.principal.key->prefix.empty()) line["key_prefix"] = ctx.principal.key->prefix;
    }
    if (!ctx.fallback.empty()) {
      line["fallback"] = ctx.fallback;
      if (ctx.requested_model) line["requested_model"] = ctx.requested_model->name;
    }
    line["status"] = ctx.status;
    line["stream"] = ctx.streaming;
    line["bytes_in"] = ctx.bytes_in;
    line["bytes_out"] = ctx.bytes_out;
    line["duration_ms"] = duration<double, std::milli>(ctx.end - ctx.start).count();
    line["ttft_ms"] = ctx.first_byte ? boost::json::value(duration<double, std::milli>(*ctx.first_byte - ctx.start).count())
                                     : boost::json::value(nullptr);
    auto tokens = [](std::int64_t v) { return v >= 0 ? boost::json::value(v) : boost::json::value(nullptr); };
    line["prompt_tokens"] = tokens(ctx.usage.prompt_tokens);
    line["completion_tokens"] = tokens(ctx.usage.completion_tokens);
    line["total_tokens"] = tokens(ctx.usage.total_tokens);
    line["cached_tokens"] = tokens(ctx.usage.cached_tokens);
    const double cost = costUsd(ctx.model, ctx.usage);
    line["cost_usd"] = cost >= 0 ? boost::json::value(cost) : boost::json::value(nullptr);
    line["api"] = apiName(ctx.endpoint);
    line["error"] = ctx.error ? boost::json::value(ctx.error->code()) : boost::json::value(nullptr);
    if (ctx.error && ctx.error->timeout_kind) line["timeout"] = ctx.error->timeout_kind;
    if (ctx.streaming) line["chunks"] = ctx.chunks_out;
    if (ctx.attempts > 1) line["attempts"] = ctx.attempts;
    sink_.append(boost::json::serialize(line));
  }

 private:
  AccessLogSink& sink_;
};

}  // namespace

std::unique_ptr<Filter> makeAccessLogFilter(AccessLogSink& sink) { return std::make_unique<AccessLogFilter>(sink); }

}  // namespace tahua
