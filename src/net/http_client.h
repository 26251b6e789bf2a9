// The outbound HTTP/1.1 client: every call the gateway makes itself that is not a proxied
// request to an upstream (server/upstream_client.h has those). Plugins' tahua.http, the
// guardrails' moderation calls and the batch poller (through WorkerServices::fetch), the
// Kubernetes API (kubernetes/kube_client.h), the exporters (OTLP traces, the usage
// webhook: BlockingHttpClient below) and `tahua --probe`.
//
// One client per io_context, used from its thread only (no locks): it keeps a pool of
// kept-alive connections per scheme://host:port, at most `max_idle_per_host` idle each,
// closed after `idle_expiry` unused; a connection that failed, was cut, answered with
// `Connection: close` or whose peer closed it while idle is never reused. A reused
// connection the peer closed just as the request went out (nothing came back) is
// replaced once by a new one, for an idempotent method or when sending failed.
//
// TLS checks the peer's certificate against the system's CAs or a given file or PEM,
// and its name against the URL's host. A call has one deadline over everything (the
// name lookup included), optionally a limit for the answer's head, an idle limit for a
// streamed body, and a bound on a body it reads whole (OutboundRequest).
//
// Asio, Beast and OpenSSL stay in http_client.cpp; http_client_await.h adapts fetch()
// for coroutines.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/duration.h"
#include "http/outbound_call.h"
#include "net/proxy_settings.h"

namespace boost::asio {
class io_context;
}

namespace tahua {

struct HttpClientOptions {
  // The CAs an https peer is checked against: a PEM file, or PEM text. Neither: the
  // system's (OpenSSL's default paths, which honour SSL_CERT_FILE and SSL_CERT_DIR).
  std::string ca_file;
  std::string ca_pem;
  // Set: every call goes through this HTTP proxy (CONNECT host:port for https, the
  // absolute URL in the request line for http).
  ProxySettings proxy;
  // Idle kept-alive connections per scheme://host:port (0: none; every call has a new
  // connection and asks the server to close it).
  std::size_t max_idle_per_host = 4;
  // An idle connection unused this long is closed.
  Millis idle_expiry{30'000};
};

class HttpClient {
 public:
  HttpClient(boost::asio::io_context& io, HttpClientOptions options = {});
  // Ends the calls in flight as closeAll() does.
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Why every call fails (a CA file that would not load), or empty.
  const std::string& setupError() const;

  // One call. `done` runs on the io_context's thread, once, never before fetch()
  // returned (not at all when the io_context is destroyed first). From that thread.
  void fetch(OutboundRequest request, std::function<void(OutboundResponse)> done);

  // Closes every connection: calls in flight end with "cancelled", idle ones are dropped.
  // Later calls work as before.
  void closeAll();

  // Connections made and calls that reused a kept-alive one, since the start.
  struct Counts {
    std::size_t opened = 0;
    std::size_t reused = 0;
    std::size_t idle = 0;  // kept now
  };
  Counts counts() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// The client on an io_context of its own, for a thread that may block (the exporters'):
// fetch() returns the answer. Its pool lives between calls; one thread at a time.
class BlockingHttpClient {
 public:
  explicit BlockingHttpClient(HttpClientOptions options = {});
  ~BlockingHttpClient();
  BlockingHttpClient(const BlockingHttpClient&) = delete;
  BlockingHttpClient& operator=(const BlockingHttpClient&) = delete;

  OutboundResponse fetch(OutboundRequest request);
  const HttpClient& client() const { return *client_; }
  // From any thread: the fetch in flight ends now, and every later one at once, with the
  // error "interrupted" (a refresher thread being stopped mid-call).
  void interrupt();

 private:
  std::unique_ptr<boost::asio::io_context> io_;
  std::unique_ptr<HttpClient> client_;
  std::atomic<bool> interrupted_{false};
};

}  // namespace tahua
