// Anthropic: /v1/messages and /v1/messages/count_tokens pass through (Anthropic-SDK clients reaching Claude, the
// client's anthropic-beta header included); OpenAI chat and Responses clients are
// translated to the Messages API. Auth: x-api-key plus the anthropic-version header.
#include "providers/translation.h"

namespace tahua {
namespace {

class AnthropicAdapter final : public TranslatingAdapter {
 public:
  AnthropicAdapter() : TranslatingAdapter(makeAnthropicCodec()) {}
  std::string_view type() const override { return "anthropic"; }

  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    if (!native(ctx, *provider.config)) return translate(ctx, provider);
    const ProviderConfig& p = *provider.config;
    if (ctx.deployment && ctx.deployment->upstream_model != ctx.facts.model)
      rewriteModel(ctx.body, ctx.facts, ctx.deployment->upstream_model);
    UpstreamRequest req;
    req.path = p.base_path;
    req.path += endpointPath(ctx.endpoint);  // /messages or /messages/count_tokens
    addCommonHeaders(req, ctx, p, "application/json", ctx.facts.stream ? "text/event-stream" : "application/json");
    if (ctx.headers) {
      std::string_view beta = ctx.headers->get("anthropic-beta");
      if (!beta.empty() && beta.find_first_of("\r\n") == std::string_view::npos) req.addHeader("anthropic-beta", beta);
    }
    authorize(req, provider);
    req.body = std::move(ctx.body);
    req.expect_stream = ctx.facts.stream;
    return req;
  }

 protected:
  bool native(const RequestContext& ctx, const ProviderConfig&) const override {
    return ctx.endpoint == Endpoint::Messages || ctx.endpoint == Endpoint::CountTokens;
  }

  std::unique_ptr<ResponseTranslator> passThroughTranslator(const RequestContext&, const UpstreamRequest&, const ProviderConfig& provider) const override {
    return makePassThroughTranslator(WireFormat::Anthropic, false, &provider);
  }

  std::optional<Error> authorize(UpstreamRequest& req, const ProviderRuntime& provider) const override {
    const ProviderConfig& p = *provider.config;
    if (!p.api_key.empty()) req.header_lines.append("x-api-key: ").append(p.api_key).append("\r\n");
    req.addHeader("anthropic-version", p.anthropic_version);
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<ProviderAdapter> makeAnthropicAdapter() { return std::make_unique<AnthropicAdapter>(); }

}  // namespace tahua
