#pragma once

#include "providers/translation.h"
#include "providers/upload_body.h"

namespace tahua {

// OpenAI-format pass-through (openai, azure-openai, mock): the client's body goes
// upstream as sent, with the model name replaced when the upstream calls it
// differently and stream usage requested when the provider's stream_usage is on.
// Returns whether the usage chunk must be hidden from the client.
bool prepareOpenAIPassThrough(RequestContext& ctx, const ProviderConfig& provider);

// The body and common headers of an OpenAI-format pass-through: the client's JSON as it
// came, or an upload's multipart around its spooled files (providers/upload_body.h).
std::optional<Error> setOpenAIBody(UpstreamRequest& req, RequestContext& ctx, const ProviderConfig& provider,
                                   std::string_view accept);

}  // namespace tahua
