// What adapters share: the pass-through translators (usage metering on the fast path)
// and the translating path (client API -> canonical chat -> vendor, and back). A vendor
// adapter is a VendorCodec (pure translation, src/translate/) plus how it authenticates
// and where it sends the request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "providers/provider.h"
#include "translate/inbound.h"

namespace tahua {

// The client's API codec for an endpoint that can be translated; nullptr otherwise
// (legacy completions and embeddings only pass through to OpenAI-format providers).
const InboundCodec* inboundFor(Endpoint e);

// The entry of an OpenAI-format endpoint in a provider's `apis` list (ProviderApi bits);
// 0 for endpoints the list does not name (Anthropic's, those answered by the gateway).
std::uint16_t providerApiOf(Endpoint e);

// The wire format a pass-through response is in (for usage and the error event shape).
// Audio: a transcription or translation (JSON, or the text formats: text, srt, vtt;
// streamed as transcript.text.* events) and speech (bytes, relayed as they come, or
// speech.audio.* events).
enum class WireFormat { OpenAIChat, Anthropic, Responses, Audio };

// The pass-through format of an OpenAI-format endpoint.
inline WireFormat wireFormat(Endpoint e) {
  if (e == Endpoint::Responses) return WireFormat::Responses;
  if (audioEndpoint(e)) return WireFormat::Audio;
  return WireFormat::OpenAIChat;
}

// Pass-through: returns the upstream bytes untouched and meters usage. With
// `strip_usage_chunk` (the gateway asked an OpenAI-format upstream for stream usage the
// client did not request) the extra usage-only chunk is cut out at event boundaries.
// Error answers are checked too: the provider's credentials are scrubbed from them and an
// OpenAI-format error object without a `type` (Azure's) gets one.
// `request` (the encoded one) gives a speech request's text, priced per character.
std::unique_ptr<ResponseTranslator> makePassThroughTranslator(WireFormat format, bool strip_usage_chunk,
                                                              const ProviderConfig* provider = nullptr,
                                                              const UpstreamRequest* request = nullptr);

// OpenAI-format streaming request without stream_options.include_usage: adds it (usage
// is what metering and cost need). Returns true if it changed the body.
bool requestStreamUsage(std::string& body);

// Header lines every upstream request carries: Content-Type, Accept, X-Request-Id and
// the provider's configured extra headers.
void addCommonHeaders(UpstreamRequest& req, const RequestContext& ctx, const ProviderConfig& provider,
                      std::string_view content_type, std::string_view accept);

// The readable text of an upstream error body that is not JSON (an HTML page): tags
// dropped, whitespace collapsed, at most `max` characters.
std::string vendorErrorText(std::string_view body, std::size_t max);

// Removes the provider's credentials from a text taken from an upstream answer.
std::string scrubSecrets(std::string text, const ProviderConfig& provider);

// Base for adapters that translate. native() endpoints pass through (the adapter
// encodes them itself); every other endpoint goes through the codec.
class TranslatingAdapter : public ProviderAdapter {
 public:
  explicit TranslatingAdapter(std::unique_ptr<VendorCodec> codec) : codec_(std::move(codec)) {}
  std::unique_ptr<ResponseTranslator> responseTranslator(const RequestContext& ctx, const UpstreamRequest& request,
                                                         const ProviderRuntime& provider) const override;

 protected:
  // Endpoints this vendor speaks natively (passed through).
  virtual bool native(const RequestContext& ctx, const ProviderConfig& provider) const = 0;
  virtual std::unique_ptr<ResponseTranslator> passThroughTranslator(const RequestContext& ctx, const UpstreamRequest& request,
                                                                    const ProviderConfig& provider) const;
  // Where the encoded request goes, relative to the origin (base path included).
  virtual std::string upstreamPath(const EncodedRequest& encoded, const RequestContext& ctx,
                                   const ProviderRuntime& provider) const;
  // Credentials and vendor headers (or a request signature) for a translated request.
  virtual std::optional<Error> authorize(UpstreamRequest& req, const ProviderRuntime& provider) const = 0;
  // The model id the codec sends: the deployment's upstream_model (the client's name
  // without one); an adapter whose names carry more (Vertex's publisher) strips it here.
  virtual std::string upstreamModel(const RequestContext& ctx) const;

  // The translating encodeRequest.
  std::variant<UpstreamRequest, Error> translate(RequestContext& ctx, const ProviderRuntime& provider) const;

  std::unique_ptr<VendorCodec> codec_;
};

}  // namespace tahua
