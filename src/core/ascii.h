// ASCII case folding for names on the wire (HTTP header names, event names): locale
// free, and the length compared first so most mismatches cost one comparison.
#pragma once

#include <cstddef>
#include <string_view>

namespace tahua {

constexpr char asciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

constexpr bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (asciiLower(a[i]) != asciiLower(b[i])) return false;
  return true;
}

}  // namespace tahua
