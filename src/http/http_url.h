// An http:// or https:// URL, split for the outbound HTTP client (net/http_client.h):
// the exporters' destinations (OTLP traces, the usage webhook), a moderation rule's
// endpoint, the Kubernetes API server, a plugin's tahua.http call; the config loader
// checks the configured ones with it too.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tahua {

struct HttpUrl {
  std::string host;
  std::string port;    // "80" by default ("443" for https)
  std::string target;  // path and query, "/" at least
  bool tls = false;    // https:// (when allowed)
};

// An http:// URL (or https://, when `allow_https`) with a host; nullopt (and `error`)
// otherwise.
std::optional<HttpUrl> parseHttpUrl(std::string_view url, std::string* error = nullptr, bool allow_https = false);

}  // namespace tahua
