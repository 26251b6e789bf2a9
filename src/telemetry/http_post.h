// A blocking HTTP/1.1 POST with one deadline over connect, send and receive, for the
// exporters' background threads (OTLP traces, the usage webhook). Never on a worker.
// Plain http:// only: collectors and billing intake run beside the gateway (a sidecar
// or an in-cluster Service); TLS is left to a mesh or a local collector.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/duration.h"
#include "http/http_url.h"

namespace tahua {

struct HttpPostResult {
  int status = 0;     // 0: no answer (error says why)
  std::string error;  // connect refused, timeout, ...
  bool ok() const { return status >= 200 && status < 300; }
};

HttpPostResult httpPost(const HttpUrl& url, const std::vector<std::pair<std::string, std::string>>& headers,
                        std::string_view content_type, std::string body, Millis timeout);

}  // namespace tahua
