// Adapter for OpenAI and every OpenAI-compatible server (vLLM, Ollama, llama.cpp,
// DeepSeek, Qwen, GLM, Moonshot, Mistral, Groq): the fast path. The APIs the provider's
// `apis` list names pass through; /v1/messages and an unlisted /v1/responses are
// translated to chat completions; any other unlisted API is a 400 naming the list.
#include "providers/openai/openai_adapter.h"

#include <bit>

namespace tahua {

bool prepareOpenAIPassThrough(RequestContext& ctx, const ProviderConfig& provider) {
  if (ctx.deployment && ctx.deployment->upstream_model != ctx.facts.model)
    rewriteModel(ctx.body, ctx.facts, ctx.deployment->upstream_model);
  const bool chat_like = ctx.endpoint == Endpoint::ChatCompletions || ctx.endpoint == Endpoint::Completions;
  return chat_like && ctx.facts.stream && !ctx.facts.include_usage && provider.stream_usage && requestStreamUsage(ctx.body);
}

std::optional<Error> setOpenAIBody(UpstreamRequest& req, RequestContext& ctx, const ProviderConfig& provider,
                                   std::string_view accept) {
  if (!ctx.upload) {
    addCommonHeaders(req, ctx, provider, "application/json", accept);
    req.body = std::move(ctx.body);
    return std::nullopt;
  }
  auto type = encodeUploadBody(ctx, req);
  if (auto* err = std::get_if<Error>(&type)) return std::move(*err);
  addCommonHeaders(req, ctx, provider, std::get<std::string>(type), accept);
  return std::nullopt;
}

namespace {

class OpenAIAdapter final : public TranslatingAdapter {
 public:
  OpenAIAdapter() : TranslatingAdapter(makeOpenAIChatCodec()) {}
  std::string_view type() const override { return "openai"; }

  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    const ProviderConfig& p = *provider.config;
    if (!native(ctx, p)) {
      if (auto err = untranslatable(ctx, p)) return std::move(*err);
      return translate(ctx, provider);
    }
    UpstreamRequest req;
    req.path = p.base_path;
    if (fileEndpoint(ctx.endpoint)) {
      // /v1/files/{id}/content and the like: the client's path and query, as they came.
      req.method = std::string(ctx.method);
      req.path += ctx.path.substr(3);
      if (!ctx.query.empty()) req.path.append("?").append(ctx.query);
    } else {
      req.path += endpointPath(ctx.endpoint);
    }
    req.hide_stream_usage = prepareOpenAIPassThrough(ctx, p);
    std::string_view accept = ctx.headers ? ctx.headers->get("accept") : std::string_view{};
    if (accept.empty()) accept = ctx.facts.stream ? "text/event-stream" : "application/json";
    if (auto err = setOpenAIBody(req, ctx, p, accept)) return std::move(*err);
    authorize(req, provider);
    req.expect_stream = ctx.facts.stream;
    return req;
  }

 protected:
  bool native(const RequestContext& ctx, const ProviderConfig& provider) const override {
    // Endpoints the list does not name pass through as before, but Anthropic's Messages.
    const std::uint16_t api = providerApiOf(ctx.endpoint);
    return api == 0 ? ctx.endpoint != Endpoint::Messages : (provider.apis & api) != 0;
  }

  std::unique_ptr<ResponseTranslator> passThroughTranslator(const RequestContext& ctx, const UpstreamRequest& request, const ProviderConfig& provider) const override {
    return makePassThroughTranslator(wireFormat(ctx.endpoint), request.hide_stream_usage, &provider, &request);
  }

  std::optional<Error> authorize(UpstreamRequest& req, const ProviderRuntime& provider) const override {
    const ProviderConfig& p = *provider.config;
    if (!p.api_key.empty()) req.header_lines.append("Authorization: Bearer ").append(p.api_key).append("\r\n");
    return std::nullopt;
  }

 private:
  // Why an endpoint the server does not serve cannot reach it: only the chat-shaped APIs
  // (Responses, Anthropic Messages) are translated, and only to a server that serves chat.
  static std::optional<Error> untranslatable(const RequestContext& ctx, const ProviderConfig& p) {
    const bool translatable = ctx.endpoint == Endpoint::Responses || ctx.endpoint == Endpoint::Messages;
    if (translatable && p.serves(ProviderApi::Chat)) return std::nullopt;
    std::string message = "The " + std::string(ctx.path) + " endpoint is not served by provider '" + p.name + "' (model '" +
                          ctx.facts.model + "'): its `apis` list does not name ";
    if (translatable) message += "`chat`, which the request would be translated to.";
    else message.append("`").append(kProviderApiNames[std::countr_zero(providerApiOf(ctx.endpoint))]).append("`.");
    return Error{ErrorKind::InvalidRequest, std::move(message)};
  }
};

}  // namespace

std::unique_ptr<ProviderAdapter> makeOpenAIAdapter() { return std::make_unique<OpenAIAdapter>(); }

}  // namespace tahua
