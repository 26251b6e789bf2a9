// A plain http:// URL, split for a client: the exporters' destinations (OTLP traces,
// the usage webhook), which the config loader checks too.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tahua {

struct HttpUrl {
  std::string host;
  std::string port;    // "80" by default
  std::string target;  // path and query, "/" at least
};

// An http:// URL with a host; nullopt (and `error`) otherwise.
std::optional<HttpUrl> parseHttpUrl(std::string_view url, std::string* error = nullptr);

}  // namespace tahua
