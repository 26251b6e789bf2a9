#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace tahua {

using Millis = std::chrono::milliseconds;

// Parses "250ms", "5s", "2m", "1h" (a non-negative integer and a unit). Anything else,
// including a bare number, is rejected so a config never guesses a unit.
std::optional<Millis> parseDuration(std::string_view text);

}  // namespace tahua
