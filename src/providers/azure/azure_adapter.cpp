// Azure OpenAI: OpenAI's wire format behind deployment URLs,
//   {base_url}/deployments/{deployment}/chat/completions?api-version={api_version}
// with an `api-key` header, or with Microsoft Entra ID an `Authorization: Bearer` access
// token from the token cache (cloud_token.h). A model's `upstream_model` is the
// deployment name.
// Chat, completions, embeddings, images and audio pass through; /v1/messages and /v1/responses are
// translated to chat completions.
#include "cloud_auth/azure_credentials.h"
#include "core/sha256.h"
#include "providers/cloud_token.h"
#include "providers/openai/openai_adapter.h"

namespace tahua {
namespace {

bool validDeployment(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

class AzureOpenAIAdapter final : public TranslatingAdapter {
 public:
  AzureOpenAIAdapter() : TranslatingAdapter(makeOpenAIChatCodec()) {}
  std::string_view type() const override { return "azure-openai"; }

  std::optional<std::string> prepare(const ProviderConfig& p) override {
    // An unset client secret leaves the provider unusable: its models answer 503.
    if (!p.azure.entra() || !p.usable) return std::nullopt;
    namespace azure = cloud_auth::azure;
    const AzureConfig& a = p.azure;
    auto& cache = cloud_auth::TokenCache::process();
    const azure::ClientCredentials app{a.authority_host, a.tenant_id, a.client_id, a.scope};
    // One entry per credential, shared by the providers that use it and kept across
    // reloads; a changed secret or certificate is a new credential.
    const std::string app_key = azure::tokenEndpoint(a.authority_host, a.tenant_id) + " " + a.client_id + " " + a.scope;
    switch (a.credential) {
      case EntraCredential::ClientSecret:
        slot_ = cache.slot("azure secret " + app_key + " " + toHex(sha256(a.client_secret)).substr(0, 16),
                           [&] { return azure::clientSecretSource(app, a.client_secret); });
        break;
      case EntraCredential::Certificate: {
        auto read = azure::readCertificateFile(a.certificate_file);
        if (auto* why = std::get_if<std::string>(&read)) return a.certificate_file + ": " + *why;
        auto& cert = std::get<azure::Certificate>(read);
        slot_ = cache.slot("azure certificate " + app_key + " " + a.certificate_file + " " + cert.digest,
                           [&] { return azure::certificateSource(app, a.certificate_file, std::move(cert)); });
        break;
      }
      case EntraCredential::WorkloadIdentity:
        slot_ = cache.slot("azure federated " + app_key + " " + a.federated_token_file,
                           [&] { return azure::federatedTokenSource(app, a.federated_token_file); });
        break;
      case EntraCredential::ManagedIdentity: {
        auto endpoint = azure::managedIdentityEndpoint();
        std::string resource = a.scope;
        if (resource.ends_with("/.default")) resource.resize(resource.size() - 9);
        slot_ = cache.slot("azure managed identity " + endpoint.url + " " + a.client_id + " " + resource, [&] {
          return azure::managedIdentitySource(std::move(endpoint), resource, a.client_id);
        });
        break;
      }
      case EntraCredential::None: break;
    }
    return std::nullopt;
  }

  std::unique_ptr<UpstreamExchange> openExchange(UpstreamRequest request, RequestContext& ctx, const ProviderRuntime& provider,
                                                 UpstreamEnv& env) const override {
    if (!slot_) return ProviderAdapter::openExchange(std::move(request), ctx, provider, env);
    return openWithCloudToken(*this, *slot_, std::move(request), ctx, provider, env);
  }

  cloud_auth::TokenSlot* tokenSlot() const override { return slot_.get(); }

  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    const ProviderConfig& p = *provider.config;
    if (!fileEndpoint(ctx.endpoint) && !validDeployment(deployment(ctx)))
      return Error{ErrorKind::InvalidRequest, "The Azure deployment name of model '" + ctx.facts.model + "' is not valid."};
    if (!native(ctx, *provider.config)) return translate(ctx, provider);
    UpstreamRequest req;
    if (fileEndpoint(ctx.endpoint)) {
      // Files and batches are the resource's, not a deployment's: {base_url}/files?api-version=...
      req.method = std::string(ctx.method);
      req.path = p.base_path;
      req.path.append(ctx.path.substr(3)).append("?api-version=").append(p.api_version);
      if (!ctx.query.empty()) req.path.append("&").append(ctx.query);
    } else {
      req.path = path(p, deployment(ctx), endpointPath(ctx.endpoint));
    }
    req.hide_stream_usage = prepareOpenAIPassThrough(ctx, p);
    const std::string_view accept = ctx.facts.stream ? "text/event-stream" : "application/json";
    if (auto err = setOpenAIBody(req, ctx, p, accept)) return std::move(*err);
    authorize(req, provider);
    req.expect_stream = ctx.facts.stream;
    return req;
  }

 protected:
  bool native(const RequestContext& ctx, const ProviderConfig&) const override {
    // Azure serves images and audio on a deployment too; moderation is its content
    // filter, and it has no rerank: those are refused naming the provider type.
    switch (ctx.endpoint) {
      case Endpoint::ChatCompletions:
      case Endpoint::Completions:
      case Endpoint::Embeddings:
      case Endpoint::ImagesGenerations:
      case Endpoint::ImagesEdits:
      case Endpoint::AudioTranscriptions:
      case Endpoint::AudioTranslations:
      case Endpoint::AudioSpeech:
      case Endpoint::Files:
      case Endpoint::FileObject:
      case Endpoint::FileContent:
      case Endpoint::Batches:
      case Endpoint::BatchObject:
      case Endpoint::BatchCancel: return true;
      default: return false;
    }
  }

  std::unique_ptr<ResponseTranslator> passThroughTranslator(const RequestContext& ctx, const UpstreamRequest& request, const ProviderConfig& provider) const override {
    return makePassThroughTranslator(wireFormat(ctx.endpoint), request.hide_stream_usage, &provider, &request);
  }

  std::string upstreamPath(const EncodedRequest& encoded, const RequestContext& ctx,
                           const ProviderRuntime& provider) const override {
    return path(*provider.config, deployment(ctx), encoded.path);
  }

  std::optional<Error> authorize(UpstreamRequest& req, const ProviderRuntime& provider) const override {
    const ProviderConfig& p = *provider.config;
    // With Entra ID the bearer token is added as the request leaves (openExchange).
    if (!p.azure.entra() && !p.api_key.empty()) req.header_lines.append("api-key: ").append(p.api_key).append("\r\n");
    return std::nullopt;
  }

 private:
  static std::string_view deployment(const RequestContext& ctx) {
    return ctx.deployment ? std::string_view(ctx.deployment->upstream_model) : std::string_view(ctx.facts.model);
  }
  static std::string path(const ProviderConfig& p, std::string_view deployment, std::string_view operation) {
    std::string out = p.base_path;
    out.append("/deployments/").append(deployment).append(operation).append("?api-version=").append(p.api_version);
    return out;
  }

  std::shared_ptr<cloud_auth::TokenSlot> slot_;  // Entra ID: the credential's token cache entry
};

}  // namespace

std::unique_ptr<ProviderAdapter> makeAzureOpenAIAdapter() { return std::make_unique<AzureOpenAIAdapter>(); }

}  // namespace tahua
