// An HTTP proxy that outbound connections go through (CONNECT for https, the absolute
// URL in the request line for http): the providers' egress proxy (HTTPS_PROXY and
// HTTP_PROXY, providers/provider.h) and the outbound HTTP client's option
// (net/http_client.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tahua {

struct ProxySettings {
  bool enabled = false;
  std::string host;
  std::uint16_t port = 0;
  std::string authorization;  // "Basic ..." when the proxy URL had credentials
};

// "http://[user:password@]host[:port]" (the scheme may be left out); nullopt for anything
// else (an https:// proxy, no host).
std::optional<ProxySettings> parseProxyUrl(std::string url);

}  // namespace tahua
