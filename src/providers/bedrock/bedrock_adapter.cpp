// AWS Bedrock Runtime, Converse / ConverseStream: every client API is translated, and
// every request is signed with AWS SigV4 (service "bedrock") from the provider's aws
// credentials. Streams come back in AWS's binary event-stream framing, which the codec
// decodes incrementally.
#include <chrono>

#include "aws/sigv4.h"
#include "providers/translation.h"
#include "translate/bedrock_codec.h"

namespace tahua {
namespace {

class BedrockAdapter final : public TranslatingAdapter {
 public:
  BedrockAdapter() : TranslatingAdapter(makeBedrockCodec()) {}
  std::string_view type() const override { return "bedrock"; }

  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    return translate(ctx, provider);
  }

 protected:
  bool native(const RequestContext&, const ProviderConfig&) const override { return false; }

  std::optional<Error> authorize(UpstreamRequest& req, const ProviderRuntime& provider) const override {
    const ProviderConfig& p = *provider.config;
    const std::string host = hostHeader(p);
    std::string_view target = req.path;
    std::string_view path = target.substr(0, target.find('?'));
    std::string_view query = path.size() < target.size() ? target.substr(path.size() + 1) : std::string_view{};
    SigV4Request s;
    s.method = req.method;
    s.host = host;
    s.path = path;
    s.query = query;
    s.headers = {{"content-type", "application/json"}};
    s.payload = req.body;
    s.region = p.aws.region;
    s.service = "bedrock";
    s.time = std::chrono::system_clock::now();
    AwsCredentials credentials{p.aws.access_key_id, p.aws.secret_access_key, p.aws.session_token};
    auto signed_ = signAwsV4(s, credentials);
    if (auto* err = std::get_if<Error>(&signed_))
      return Error{ErrorKind::ProviderUnavailable, "The bedrock provider '" + p.name + "' cannot sign requests: " + err->message};
    for (const auto& [name, value] : std::get<SigV4Result>(signed_).headers) req.addHeader(name, value);
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<ProviderAdapter> makeBedrockAdapter() { return std::make_unique<BedrockAdapter>(); }

}  // namespace tahua
