#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

// Reads model/stream from the body and resolves the public model name to its provider.
// Later issues (routes, balancing, canaries) replace the selection step here.
std::unique_ptr<Filter> makeRouterFilter();

}  // namespace tahua
