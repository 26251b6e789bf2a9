#include "core/duration.h"

#include <charconv>

namespace tahua {

std::optional<Millis> parseDuration(std::string_view text) {
  std::int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc{} || ptr == begin || value < 0) return std::nullopt;
  std::string_view unit(ptr, static_cast<size_t>(end - ptr));
  std::int64_t factor = 0;
  if (unit == "ms") factor = 1;
  else if (unit == "s") factor = 1000;
  else if (unit == "m") factor = 60'000;
  else if (unit == "h") factor = 3'600'000;
  else if (unit == "d") factor = 86'400'000;
  else return std::nullopt;
  if (value > std::int64_t{1} << 40) return std::nullopt;  // absurd; also avoids overflow
  return Millis(value * factor);
}

}  // namespace tahua
