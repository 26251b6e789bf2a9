// UTF-8 text cut to a size without splitting a character.
#pragma once

#include <cstddef>
#include <string_view>

namespace tahua {

// Where a cut at `n` may go without splitting a character (at or before n; the whole
// text when n is past its end).
inline std::size_t utf8Floor(std::string_view s, std::size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace tahua
