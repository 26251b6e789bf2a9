#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

// POST /v1/messages/count_tokens. Models served by an `anthropic` provider get Anthropic's
// exact count (the request passes through); every other model is answered locally from
// the token estimator, without an upstream call.
std::unique_ptr<Filter> makeCountTokensFilter();

}  // namespace tahua
