// The exporters' POST of a batch (OTLP traces, JSON or protobuf; the usage webhook), sent from their
// own threads with a BlockingHttpClient (net/http_client.h): one deadline over the
// whole call, the connection kept for the next batch, the answer's body (read and
// dropped) bounded. The content type goes first: a configured header may replace it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/duration.h"
#include "http/outbound_call.h"

namespace tahua {

inline OutboundRequest exportPost(const HttpUrl& url, const std::vector<std::pair<std::string, std::string>>& headers,
                                  std::string body, Millis timeout,
                                  std::string_view content_type = "application/json") {
  OutboundRequest r;
  r.method = "POST";
  r.url = url;
  r.headers.reserve(headers.size() + 1);
  r.headers.emplace_back("content-type", content_type);
  r.headers.insert(r.headers.end(), headers.begin(), headers.end());
  r.body = std::move(body);
  r.timeout = timeout;
  r.max_response_bytes = 1 << 20;
  return r;
}

}  // namespace tahua
