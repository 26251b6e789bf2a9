// An HTTP call the gateway makes itself (a plugin's tahua.http, a moderation rule, the
// batch poller, the exporters, the Kubernetes API), and its answer; made by the outbound
// HTTP client (net/http_client.h), on a worker through WorkerServices::fetch.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
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
  // One deadline over the whole call, from the name lookup to the body's last byte
  // (0: none; a stream that idle_timeout bounds).
  Millis timeout{2'000};
  // The answer's head within this from the start (0: `timeout` alone).
  Millis head_timeout{0};
  // Once the head is in: the longest wait for the body's next bytes (0: none).
  Millis idle_timeout{0};
  // A body read into `body` longer than this fails the call ("response too large").
  std::size_t max_response_bytes = 64 << 10;
  // Set: the body of a 2xx answer is handed over piece by piece as it arrives, neither
  // kept nor bounded by max_response_bytes (a watch runs for minutes); returning false
  // ends the call there, without an error. Another status's body is read into `body`.
  std::function<bool(std::string_view piece)> on_body;
};

struct OutboundResponse {
  int status = 0;     // 0: no answer (error says why)
  std::string error;  // "timeout", "connect: ...", "response too large", ...; a stream
                      // cut after its head keeps its status ("idle", "receive: ...")
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string body;
};

}  // namespace tahua
