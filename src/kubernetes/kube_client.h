// Calls to the Kubernetes API server: in-cluster credentials (a bearer token read again
// for every call, since projected service-account tokens rotate; the cluster's CA),
// made by an outbound HTTP client of its own (net/http_client.h: connections kept
// alive between calls), all on one io_context (the Kubernetes thread, kube_runtime.h).
// A list or a patch reads the whole answer; a watch hands each line of its body over as
// it arrives.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "config/config.h"

namespace boost::asio {
class io_context;
}

namespace tahua {

struct KubeResponse {
  int status = 0;     // 0: no answer (error says why)
  std::string error;  // "timeout", "connect: ...", "idle", "cancelled", ...
  std::string body;   // the answer's body (a stream's: only when it is not 200)
};

class KubeClient {
 public:
  KubeClient(boost::asio::io_context& io, KubernetesConfig config);
  ~KubeClient();

  const KubernetesConfig& config() const { return config_; }
  boost::asio::io_context& io();
  bool cancelled() const { return cancelled_; }

  // One call within config.timeout; the answer's body is bounded (16 MiB).
  boost::asio::awaitable<KubeResponse> call(std::string_view method, std::string target, std::string body = {},
                                            std::string_view content_type = {});
  // A watch: each line of a 200 answer's body goes to `on_line` (false stops it). Returns
  // when the answer ends, fails, sends nothing for `idle`, or on_line stops it; a line
  // longer than 16 MiB ends it with an error.
  boost::asio::awaitable<KubeResponse> stream(std::string target, Millis idle,
                                              std::function<bool(std::string_view line)> on_line);
  // Closes every open connection (the calls in flight end with "cancelled"; the kept
  // ones close) and makes every later call fail (at stop). On the io_context's thread.
  void cancel();

 private:
  struct Impl;
  KubernetesConfig config_;
  std::unique_ptr<Impl> impl_;
  bool cancelled_ = false;
};

}  // namespace tahua
