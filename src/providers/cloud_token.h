// Requests that carry a cloud access token (cloud_auth/token_cache.h) instead of an API
// key: Vertex AI's and Azure OpenAI's with Entra ID. The token is added as the request leaves
// (after the filters' headers: none of them sees it). Until the credential's first token
// has arrived an attempt waits for it, at most the provider's token_wait, then fails
// with ProviderUnavailable saying why; once a token has expired unreplaced (its refresh
// failing), attempts fail at once. Either failure counts against the deployment
// (breaker, fallback models), as an unreachable upstream does.
//
// The gateway's other calls to such a provider read the same entry (the adapter's
// tokenSlot()): the realtime handshake waits as an attempt does (awaitCloudToken), the
// batch poller takes the token that is there now or none (currentCloudToken).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>
#include <variant>

#include "cloud_auth/token_cache.h"
#include "providers/provider.h"

namespace tahua {

std::unique_ptr<UpstreamExchange> openWithCloudToken(const ProviderAdapter& adapter, cloud_auth::TokenSlot& slot,
                                                     UpstreamRequest request, RequestContext& ctx,
                                                     const ProviderRuntime& provider, UpstreamEnv& env);

// The bearer token usable now, or the error an attempt that did not wait fails with
// (ProviderUnavailable, saying why; never the token).
std::variant<std::string, Error> currentCloudToken(const cloud_auth::TokenSlot& slot, const ProviderConfig& provider);

// The bearer token, waiting for a first one as an attempt does (at most token_wait; not
// at all once a token expired unreplaced), or the error the attempt would fail with.
boost::asio::awaitable<std::variant<std::string, Error>> awaitCloudToken(cloud_auth::TokenSlot& slot,
                                                                        const ProviderConfig& provider);

}  // namespace tahua
