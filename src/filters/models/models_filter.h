#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

// Answers GET /v1/models from the config snapshot (OpenAI's list shape).
std::unique_ptr<Filter> makeModelsFilter();

}  // namespace tahua
