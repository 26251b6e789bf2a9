// Reading one parameter of a request's query string (the part after '?'), without
// decoding: what route matchers and version pins compare against.
#pragma once

#include <optional>
#include <string_view>

namespace tahua {

// The raw value of `name` ("" for a bare flag), or nullopt when it is absent.
inline std::optional<std::string_view> queryParam(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == name) return eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
  }
  return std::nullopt;
}

}  // namespace tahua
