// Finding one key in JSON text without parsing it: the relay's look at every stream event
// (is there usage, a finish reason) and at whole bodies, before deciding to parse.
#pragma once

#include <cstring>
#include <string_view>

namespace tahua {

// Offset of the last `"key"` (the quotes included in `quoted_key`) in `json`, or npos.
// Searched from the end: the keys the relay looks for (usage, finish_reason) close
// OpenAI-format objects, so in a stream chunk the match is a few dozen bytes from the
// end. The candidates are the places of the key's first letter, not of its quote: a
// quote opens and closes every key and string (an answer's usage object alone has ~40),
// a given letter is rarer. Inside a JSON string a quote is escaped, so text can never
// match, only a key (or a string value equal to the key's name).
inline std::size_t findLastKey(std::string_view json, std::string_view quoted_key) {
  const std::size_t n = quoted_key.size();
  if (n < 2 || json.size() < n) return std::string_view::npos;
  const char letter = quoted_key[1];
  // A match at `at` has its letter at at + 1, at most json.size() - n + 1.
  std::size_t limit = json.size() - n + 2;  // letters searched at [1, limit)
  while (limit > 1) {
    const void* hit = ::memrchr(json.data() + 1, letter, limit - 1);
    if (!hit) break;
    const std::size_t pos = static_cast<std::size_t>(static_cast<const char*>(hit) - json.data());
    if (std::memcmp(json.data() + pos - 1, quoted_key.data(), n) == 0) return pos - 1;
    limit = pos;
  }
  return std::string_view::npos;
}

}  // namespace tahua
