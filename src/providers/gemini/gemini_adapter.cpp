// Google Gemini (generateContent / streamGenerateContent with alt=sse): every client
// API is translated. Auth: the x-goog-api-key header (never a ?key= query parameter,
// which would end up in logs along the way).
#include "providers/translation.h"
#include "translate/gemini_codec.h"

namespace tahua {
namespace {

class GeminiAdapter final : public TranslatingAdapter {
 public:
  GeminiAdapter() : TranslatingAdapter(makeGeminiCodec()) {}
  std::string_view type() const override { return "gemini"; }

  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    return translate(ctx, provider);
  }

 protected:
  bool native(const RequestContext&, const ProviderConfig&) const override { return false; }

  std::optional<Error> authorize(UpstreamRequest& req, const ProviderRuntime& provider) const override {
    const ProviderConfig& p = *provider.config;
    if (!p.api_key.empty()) req.header_lines.append("x-goog-api-key: ").append(p.api_key).append("\r\n");
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<ProviderAdapter> makeGeminiAdapter() { return std::make_unique<GeminiAdapter>(); }

}  // namespace tahua
