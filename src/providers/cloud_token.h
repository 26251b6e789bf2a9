// Requests that carry a cloud access token (cloud_auth/token_cache.h) instead of an API
// key: Vertex AI's and Azure OpenAI's with Entra ID. The token is added as the request leaves
// (after the filters' headers: none of them sees it). Until the credential's first token
// has arrived an attempt waits for it, at most the provider's token_wait, then fails
// with ProviderUnavailable saying why; once a token has expired unreplaced (its refresh
// failing), attempts fail at once. Either failure counts against the deployment
// (breaker, fallback models), as an unreachable upstream does.
#pragma once

#include <memory>

#include "cloud_auth/token_cache.h"
#include "providers/provider.h"

namespace tahua {

std::unique_ptr<UpstreamExchange> openWithCloudToken(const ProviderAdapter& adapter, cloud_auth::TokenSlot& slot,
                                                     UpstreamRequest request, RequestContext& ctx,
                                                     const ProviderRuntime& provider, UpstreamEnv& env);

}  // namespace tahua
