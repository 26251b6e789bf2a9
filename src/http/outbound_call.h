// An HTTP call a filter makes itself (a plugin's tahua.http), and its answer; made by the
// worker (WorkerServices::fetch, server/outbound_client.h).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/duration.h"
#include "http/http_url.h"

namespace tahua {

struct OutboundRequest {
  std::string method = "GET";
  HttpUrl url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  Millis timeout{2'000};
  std::size_t max_response_bytes = 64 << 10;
};

struct OutboundResponse {
  int status = 0;     // 0: no answer (error says why)
  std::string error;  // "timeout", "connect: ...", "response too large", ...
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string body;
};

}  // namespace tahua
