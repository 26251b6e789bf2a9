// Finding one key in JSON text without parsing it: the relay's look at every stream event
// (is there usage, a finish reason) and at whole bodies, before deciding to parse.
#pragma once

#include <cstring>
#include <string_view>

namespace tahua {

// Offset of the last `"key"` (the quotes included in `quoted_key`) in `json`, or npos.
// Searched from the end: the keys the relay looks for (usage, finish_reason) close
// OpenAI-format objects, so in a stream chunk the match is a few dozen bytes from the
// end; searching from the front, each of the chunk's ~40 quotes was a candidate. Inside
// a JSON string a quote is escaped, so text can never match, only a key (or a string
// value equal to the key's name).
inline std::size_t findLastKey(std::string_view json, std::string_view quoted_key) {
  const std::size_t n = quoted_key.size();
  if (n == 0 || json.size() < n) return std::string_view::npos;
  const char first = quoted_key.front();
  std::size_t limit = json.size() - n + 1;  // candidates start before this
  while (limit > 0) {
    const void* hit = ::memrchr(json.data(), first, limit);
    if (!hit) break;
    const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(hit) - json.data());
    if (std::memcmp(json.data() + at, quoted_key.data(), n) == 0) return at;
    limit = at;
  }
  return std::string_view::npos;
}

}  // namespace tahua
