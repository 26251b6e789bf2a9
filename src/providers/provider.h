// A provider adapter translates between the gateway's inbound API (OpenAI's, for now)
// and one vendor's wire format. Adding a vendor is its folder under providers/ (the
// adapter and its kind: type name, settings, default endpoint; config/provider_kind.h)
// plus one line in providers/vendors.h; the proxy loop does not change.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.h"
#include "net/proxy_settings.h"
#include "request/request_context.h"
#include "providers/exchange.h"

namespace boost::asio::ssl {
class context;
}

namespace tahua::cloud_auth {
class TokenSlot;
}

namespace tahua {

struct UpstreamEnv;

// Observes (and, for translating adapters, rewrites) the response.
class ResponseTranslator {
 public:
  virtual ~ResponseTranslator() = default;
  // The upstream's response head, before anything is written: a translating adapter
  // changes what the client sees (content type; whether it is a stream).
  virtual void onResponseHead(ResponseHead& head, RequestContext& ctx) {}
  // A piece of the response stream on its way to the client; returns the bytes to send
  // (the input itself for pass-through). `last`: the upstream ended after these bytes.
  // Fills ctx.usage when the stream reports it.
  virtual std::string_view onStreamBytes(std::string_view bytes, bool last, RequestContext& ctx) = 0;
  // True once the translator ended the stream itself (an error event was the last thing
  // it returned): the relay stops reading the upstream.
  virtual bool streamEnded() const { return false; }
  // Whether everything returned so far ends between two events (a stream ended here,
  // with an error event appended, is well-formed). Translators that emit whole events
  // are always there; a pass-through relays the upstream's pieces as they come.
  virtual bool atEventBoundary() const { return true; }
  // A whole non-streaming body; may rewrite it in place and change ctx.status. Fills ctx.usage.
  virtual void onBody(std::string& body, RequestContext& ctx) = 0;
  // The final event sent when a stream must end early (upstream failed, drain).
  virtual std::string streamErrorEvent(const Error& error) const = 0;
};

struct ProviderRuntime;

class ProviderAdapter {
 public:
  virtual ~ProviderAdapter() = default;
  virtual std::string_view type() const = 0;
  // Once, when the snapshot is built (before any request): what the adapter keeps of the
  // provider's config (a cloud credential's token cache entry). An error fails the
  // snapshot (the start, or a reload: the previous config stays).
  virtual std::optional<std::string> prepare(const ProviderConfig& provider);
  // Builds the upstream request from the inbound one (path, headers, body).
  virtual std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx,
                                                            const ProviderRuntime& provider) const = 0;
  // How the answer to `request` (just encoded) reaches the client.
  virtual std::unique_ptr<ResponseTranslator> responseTranslator(const RequestContext& ctx, const UpstreamRequest& request,
                                                                 const ProviderRuntime& provider) const = 0;
  // The transport: HTTP(S) through the worker's connection pool by default.
  virtual std::unique_ptr<UpstreamExchange> openExchange(UpstreamRequest request, RequestContext& ctx,
                                                         const ProviderRuntime& provider, UpstreamEnv& env) const;
  // The token cache entry of a provider that authenticates with a cloud access token
  // (Azure's Entra ID, Vertex's Google credentials), made by prepare(): the gateway's
  // calls to the provider outside an exchange (the batch poller's, the realtime
  // handshake) carry its token too (providers/cloud_token.h). Null for a key.
  virtual cloud_auth::TokenSlot* tokenSlot() const { return nullptr; }
};

// Egress proxy settings from HTTPS_PROXY / HTTP_PROXY / NO_PROXY.
ProxySettings proxyFor(const ProviderConfig& provider);

// The Host header the transport sends to this provider ("host" or "host:port").
std::string hostHeader(const ProviderConfig& provider);

// Everything a provider needs at run time, built once per config snapshot and shared
// read-only by all workers (an OpenSSL SSL_CTX is safe to share once set up).
struct ProviderRuntime {
  const ProviderConfig* config = nullptr;
  std::unique_ptr<ProviderAdapter> adapter;
  std::shared_ptr<boost::asio::ssl::context> tls;  // for https upstreams
  ProxySettings proxy;
  std::string origin_key;  // pool key: scheme://host:port (+ proxy)
};

std::unique_ptr<ProviderAdapter> makeOpenAIAdapter();
std::unique_ptr<ProviderAdapter> makeAzureOpenAIAdapter();
std::unique_ptr<ProviderAdapter> makeAnthropicAdapter();
std::unique_ptr<ProviderAdapter> makeGeminiAdapter();
std::unique_ptr<ProviderAdapter> makeBedrockAdapter();
std::unique_ptr<ProviderAdapter> makeVertexAdapter();
std::unique_ptr<ProviderAdapter> makeMockAdapter();
std::unique_ptr<ProviderAdapter> makeMcpAdapter();

// Usage object {"prompt_tokens":..,"completion_tokens":..,"total_tokens":..} inside a
// JSON document (a chat.completion, a chunk, an embeddings list). False if absent.
bool extractOpenAIUsage(std::string_view json, Usage& usage);
// How many elements the top-level array `key` of a JSON object holds (-1: none, or not
// an object): the images an images answer carries in `data`.
std::int64_t topLevelArraySize(std::string& json, std::string_view key);
// Same, for a body the caller owns: pads it in place (may reallocate) instead of copying.
bool extractOpenAIUsage(std::string& json, Usage& usage);

}  // namespace tahua
