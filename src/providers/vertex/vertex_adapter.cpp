// Google Cloud Vertex AI: two publishers' models behind one project's endpoint,
//   {base_url}/projects/{project}/locations/{location}/publishers/{publisher}/models/{model}:{method}
// Google's Gemini models speak the Gemini API (generateContent, streamGenerateContent
// with alt=sse, predict for embeddings) through the Gemini codec; Anthropic's Claude
// models speak the Messages API (rawPredict, streamRawPredict) with the model in the
// path instead of the body and `anthropic_version: vertex-2023-10-16` in it: Anthropic-SDK
// clients pass through, the other APIs are translated by the Anthropic codec. Every
// request carries an OAuth2 access token from the token cache (cloud_token.h).
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "cloud_auth/google_credentials.h"
#include "core/json_read.h"
#include "providers/cloud_token.h"
#include "providers/translation.h"
#include "providers/vertex/vertex_embeddings.h"
#include "translate/gemini_codec.h"

namespace tahua {
namespace {

namespace bj = boost::json;

constexpr std::string_view kAnthropicVersion = "vertex-2023-10-16";

enum class Publisher { Google, Anthropic };

// A model id spliced into the path: letters, digits and . - _ @ (Claude's versions:
// claude-sonnet-4-5@20250929), nothing that could add a segment, a query or a method.
bool validModelId(std::string_view id) {
  if (id.empty() || id.size() > 200 || id.front() == '.') return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
          c == '_' || c == '@'))
      return false;
  return true;
}

// Whose model it is, and its id: `publishers/<publisher>/models/<id>` says it outright;
// otherwise `claude-*` is Anthropic's and anything else Google's.
struct ModelRef {
  Publisher publisher = Publisher::Google;
  std::string id;
};

std::variant<ModelRef, Error> modelRef(const RequestContext& ctx) {
  std::string_view name = ctx.deployment ? std::string_view(ctx.deployment->upstream_model) : std::string_view(ctx.facts.model);
  ModelRef ref;
  if (name.starts_with("publishers/")) {
    std::string_view rest = name.substr(11);
    const auto slash = rest.find('/');
    const std::string_view publisher = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
    if (!rest.starts_with("models/"))
      return Error{ErrorKind::InvalidRequest, "The Vertex model '" + std::string(name) + "' of model '" + ctx.facts.model +
                                                  "' is not of the form publishers/<publisher>/models/<id>."};
    if (publisher == "google") ref.publisher = Publisher::Google;
    else if (publisher == "anthropic") ref.publisher = Publisher::Anthropic;
    else
      return Error{ErrorKind::InvalidRequest, "The Vertex publisher '" + std::string(publisher) + "' of model '" +
                                                  ctx.facts.model + "' is not supported (google, anthropic)."};
    name = rest.substr(7);
  } else if (name.starts_with("claude-")) {
    ref.publisher = Publisher::Anthropic;
  }
  if (!validModelId(name))
    return Error{ErrorKind::InvalidRequest, "The Vertex model id '" + std::string(name) + "' of model '" + ctx.facts.model +
                                                "' is not valid (allowed: letters, digits, '.', '-', '_', '@')."};
  ref.id = std::string(name);
  return ref;
}

// {base_path}/projects/{project}/locations/{location}/publishers/{publisher}
std::string publisherPath(const ProviderConfig& p, Publisher publisher) {
  std::string out = p.base_path;
  out.append("/projects/").append(p.gcp.project).append("/locations/").append(p.gcp.location);
  out.append(publisher == Publisher::Anthropic ? "/publishers/anthropic" : "/publishers/google");
  return out;
}

// Gemini models: every client API translated by the Gemini codec, whose paths
// (/models/{id}:generateContent) go under the publisher's.
class VertexGemini final : public TranslatingAdapter {
 public:
  VertexGemini() : TranslatingAdapter(makeGeminiCodec()) {}
  std::string_view type() const override { return "vertex"; }
  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    return translate(ctx, provider);
  }

 protected:
  bool native(const RequestContext&, const ProviderConfig&) const override { return false; }
  std::string upstreamModel(const RequestContext& ctx) const override {
    auto ref = modelRef(ctx);
    return std::holds_alternative<ModelRef>(ref) ? std::get<ModelRef>(ref).id : std::string();
  }
  std::string upstreamPath(const EncodedRequest& encoded, const RequestContext&, const ProviderRuntime& provider) const override {
    return publisherPath(*provider.config, Publisher::Google) + encoded.path;
  }
  std::optional<Error> authorize(UpstreamRequest&, const ProviderRuntime&) const override { return std::nullopt; }
};

// Google's error shape ({"error":{"code","message","status"}}: Vertex's own refusals,
// a bad token, quota) re-shaped as Anthropic's for an Anthropic-SDK client; Anthropic's
// own errors pass as they are.
class VertexAnthropicPassThrough final : public ResponseTranslator {
 public:
  explicit VertexAnthropicPassThrough(const ProviderConfig& provider)
      : inner_(makePassThroughTranslator(WireFormat::Anthropic, false, &provider)), provider_(provider) {}
  void onResponseHead(ResponseHead& head, RequestContext& ctx) override { inner_->onResponseHead(head, ctx); }
  std::string_view onStreamBytes(std::string_view bytes, bool last, RequestContext& ctx) override {
    return inner_->onStreamBytes(bytes, last, ctx);
  }
  bool streamEnded() const override { return inner_->streamEnded(); }
  bool atEventBoundary() const override { return inner_->atEventBoundary(); }
  std::string streamErrorEvent(const Error& error) const override { return inner_->streamErrorEvent(error); }
  void onBody(std::string& body, RequestContext& ctx) override {
    if (ctx.status >= 200 && ctx.status < 300) return inner_->onBody(body, ctx);
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (!ec && v.is_array() && !v.get_array().empty()) v = v.get_array().front();
    const bj::object* o = !ec ? v.if_object() : nullptr;
    const bool google = o && !o->contains("type") && o->contains("error") && o->at("error").is_object() &&
                        o->at("error").get_object().contains("status");
    if (!google) return inner_->onBody(body, ctx);
    UpstreamErrorInfo info = makeGeminiCodec()->decodeError(ctx.status, body);
    info.message = scrubSecrets(std::move(info.message), provider_);
    body = anthropicInbound().encodeUpstreamError(info);
  }

 private:
  std::unique_ptr<ResponseTranslator> inner_;
  const ProviderConfig& provider_;
};

// Claude models: Anthropic-SDK clients pass through (the body rewritten for Vertex), the
// other APIs are translated by the Anthropic codec; both go to rawPredict or streamRawPredict.
class VertexAnthropic final : public TranslatingAdapter {
 public:
  VertexAnthropic() : TranslatingAdapter(makeAnthropicCodec()) {}
  std::string_view type() const override { return "vertex"; }

  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    const ProviderConfig& p = *provider.config;
    UpstreamRequest req;
    if (native(ctx, p)) {
      req.path = upstreamPath({}, ctx, provider);
      addCommonHeaders(req, ctx, p, "application/json", ctx.facts.stream ? "text/event-stream" : "application/json");
      if (ctx.headers) {
        std::string_view beta = ctx.headers->get("anthropic-beta");
        if (!beta.empty() && beta.find_first_of("\r\n") == std::string_view::npos) req.addHeader("anthropic-beta", beta);
      }
      req.body = std::move(ctx.body);
      req.expect_stream = ctx.facts.stream;
    } else {
      auto translated = translate(ctx, provider);
      if (auto* err = std::get_if<Error>(&translated)) return std::move(*err);
      req = std::move(std::get<UpstreamRequest>(translated));
    }
    if (auto err = forVertex(req.body)) return std::move(*err);
    return req;
  }

 protected:
  bool native(const RequestContext& ctx, const ProviderConfig&) const override { return ctx.endpoint == Endpoint::Messages; }

  std::unique_ptr<ResponseTranslator> passThroughTranslator(const RequestContext&, const UpstreamRequest&,
                                                            const ProviderConfig& provider) const override {
    return std::make_unique<VertexAnthropicPassThrough>(provider);
  }

  std::string upstreamPath(const EncodedRequest&, const RequestContext& ctx, const ProviderRuntime& provider) const override {
    std::string out = publisherPath(*provider.config, Publisher::Anthropic);
    out.append("/models/").append(std::get<ModelRef>(modelRef(ctx)).id);
    out.append(ctx.facts.stream ? ":streamRawPredict" : ":rawPredict");
    return out;
  }

  std::optional<Error> authorize(UpstreamRequest&, const ProviderRuntime&) const override { return std::nullopt; }

 private:
  // Vertex's Messages body: the model is in the path, not in the body, and the version
  // is Vertex's own.
  static std::optional<Error> forVertex(std::string& body) {
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (ec || !v.is_object()) return Error{ErrorKind::InvalidJson, "The request body is not a JSON object."};
    bj::object& o = v.get_object();
    o.erase("model");
    o["anthropic_version"] = kAnthropicVersion;
    body = bj::serialize(o);
    return std::nullopt;
  }
};

class VertexAdapter final : public ProviderAdapter {
 public:
  std::string_view type() const override { return "vertex"; }

  std::optional<std::string> prepare(const ProviderConfig& p) override {
    namespace google = cloud_auth::google;
    auto& cache = cloud_auth::TokenCache::process();
    // One entry per credential, shared by the providers that use it and kept across
    // reloads; a credentials file whose content changed is a new credential.
    if (!p.gcp.token_file.empty()) {
      slot_ = cache.slot("google token_file " + p.gcp.token_file, [&] { return google::tokenFileSource(p.gcp.token_file); });
    } else if (!p.gcp.credentials_file.empty()) {
      auto read = google::readCredentialsFile(p.gcp.credentials_file);
      if (auto* why = std::get_if<std::string>(&read)) return p.gcp.credentials_file + ": " + *why;
      auto& file = std::get<google::CredentialsFile>(read);
      slot_ = cache.slot("google file " + p.gcp.credentials_file + " " + file.digest, [&] { return std::move(file.source); });
    } else {
      slot_ = cache.slot("google metadata " + google::metadataHost(), [] { return google::metadataSource(); });
    }
    return std::nullopt;
  }

  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    auto ref = modelRef(ctx);
    if (auto* err = std::get_if<Error>(&ref)) return std::move(*err);
    const ModelRef& model = std::get<ModelRef>(ref);
    if (ctx.endpoint == Endpoint::Embeddings) return embeddings(ctx, provider, model);
    return (model.publisher == Publisher::Anthropic ? static_cast<const ProviderAdapter&>(anthropic_) : gemini_)
        .encodeRequest(ctx, provider);
  }

  std::unique_ptr<ResponseTranslator> responseTranslator(const RequestContext& ctx, const UpstreamRequest& request,
                                                         const ProviderRuntime& provider) const override {
    if (ctx.endpoint == Endpoint::Embeddings) return makeVertexEmbeddingsTranslator(wantsBase64Embeddings(ctx.body), *provider.config);
    const auto ref = modelRef(ctx);  // valid: encodeRequest passed
    const bool anthropic = std::holds_alternative<ModelRef>(ref) && std::get<ModelRef>(ref).publisher == Publisher::Anthropic;
    return (anthropic ? static_cast<const ProviderAdapter&>(anthropic_) : gemini_).responseTranslator(ctx, request, provider);
  }

  std::unique_ptr<UpstreamExchange> openExchange(UpstreamRequest request, RequestContext& ctx, const ProviderRuntime& provider,
                                                 UpstreamEnv& env) const override {
    return openWithCloudToken(*this, *slot_, std::move(request), ctx, provider, env);
  }

  cloud_auth::TokenSlot* tokenSlot() const override { return slot_.get(); }

 private:
  static std::variant<UpstreamRequest, Error> embeddings(RequestContext& ctx, const ProviderRuntime& provider, const ModelRef& model) {
    const ProviderConfig& p = *provider.config;
    if (model.publisher != Publisher::Google)
      return Error{ErrorKind::InvalidRequest, "The /v1/embeddings endpoint is not served by Anthropic's models on Vertex AI (model '" +
                                                  ctx.facts.model + "')."};
    auto body = vertexEmbeddingsBody(ctx.body);
    if (auto* err = std::get_if<Error>(&body)) return std::move(*err);
    UpstreamRequest req;
    req.path = publisherPath(p, Publisher::Google);
    req.path.append("/models/").append(model.id).append(":predict");
    addCommonHeaders(req, ctx, p, "application/json", "application/json");
    req.body = std::move(std::get<std::string>(body));  // ctx.body stays: the translator reads encoding_format
    return req;
  }

  VertexGemini gemini_;
  VertexAnthropic anthropic_;
  std::shared_ptr<cloud_auth::TokenSlot> slot_;
};

}  // namespace

std::unique_ptr<ProviderAdapter> makeVertexAdapter() { return std::make_unique<VertexAdapter>(); }

}  // namespace tahua
