#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

// Keeps the provider's credentials out of every byte the client gets from an upstream
// answer: response headers, whole bodies and stream pieces (with a secret cut across
// two reads caught by holding back only its possible start; see SecretScrubber).
std::unique_ptr<Filter> makeSecretFilter();

}  // namespace tahua
