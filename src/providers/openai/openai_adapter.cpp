// Adapter for OpenAI and every OpenAI-compatible server (vLLM, Ollama, llama.cpp,
// DeepSeek, ...): the fast path. The body goes upstream as the client sent it, with
// only the model name replaced when the upstream calls it differently.
#include "providers/openai/openai_adapter.h"

#include "sse/sse_parser.h"

namespace tahua {
namespace {

class PassThroughTranslator final : public ResponseTranslator, private SseSink {
 public:
  std::string_view onStreamBytes(std::string_view bytes, RequestContext& ctx) override {
    ctx_ = &ctx;
    parser_.feed(bytes, *this);  // an oversized event only stops observation, not the relay
    return bytes;
  }
  void onBody(std::string& body, RequestContext& ctx) override { extractOpenAIUsage(body, ctx.usage); }
  std::string streamErrorEvent(const Error& error) const override { return "data: " + error.toJson() + "\n\n"; }

 private:
  void onEvent(const SseEvent& event) override {
    if (event.data == "[DONE]") return;
    extractOpenAIUsage(event.data, ctx_->usage);
  }

  SseParser parser_;
  RequestContext* ctx_ = nullptr;
};

class OpenAIAdapter final : public ProviderAdapter {
 public:
  std::string_view type() const override { return "openai"; }

  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    const ProviderConfig& p = *provider.config;
    UpstreamRequest req;
    req.path = p.base_path;
    req.path += endpointPath(ctx.endpoint);
    if (ctx.model && ctx.model->upstream_model != ctx.facts.model) rewriteModel(ctx.body, ctx.facts, ctx.model->upstream_model);
    req.header_lines.reserve(256);
    req.addHeader("Content-Type", "application/json");
    std::string_view accept = ctx.headers ? ctx.headers->get("accept") : std::string_view{};
    if (accept.empty()) accept = ctx.facts.stream ? "text/event-stream" : "application/json";
    req.addHeader("Accept", accept);
    if (!p.api_key.empty()) {
      req.header_lines.append("Authorization: Bearer ").append(p.api_key).append("\r\n");
    }
    req.addHeader("X-Request-Id", ctx.request_id);
    for (const auto& [name, value] : p.headers) req.addHeader(name, value);
    req.body = std::move(ctx.body);
    req.expect_stream = ctx.facts.stream;
    return req;
  }

  std::unique_ptr<ResponseTranslator> responseTranslator(const RequestContext&) const override {
    return makeOpenAIPassThroughTranslator();
  }
};

}  // namespace

std::unique_ptr<ResponseTranslator> makeOpenAIPassThroughTranslator() {
  return std::make_unique<PassThroughTranslator>();
}

std::unique_ptr<ProviderAdapter> makeOpenAIAdapter() { return std::make_unique<OpenAIAdapter>(); }

}  // namespace tahua
