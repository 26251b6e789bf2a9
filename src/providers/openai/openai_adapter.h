#pragma once

#include <memory>

#include "providers/provider.h"

namespace tahua {

// The translator for OpenAI-format responses: passes bytes through untouched and
// watches the event stream (or the body) for usage. Shared by every adapter whose
// upstream speaks OpenAI's format (openai, mock).
std::unique_ptr<ResponseTranslator> makeOpenAIPassThroughTranslator();

}  // namespace tahua
