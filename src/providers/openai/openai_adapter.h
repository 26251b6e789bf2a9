#pragma once

#include "providers/translation.h"
#include "providers/upload_body.h"

namespace tahua {

// OpenAI-format pass-through (openai, azure-openai, mock): the client's body goes
// upstream as sent, with the model name replaced when the upstream calls it
// differently and stream usage requested when the provider's stream_usage is on.
// Returns whether the usage chunk must be hidden from the client.
bool prepareOpenAIPassThrough(RequestContext& ctx, const ProviderConfig& provider);

}  // namespace tahua
