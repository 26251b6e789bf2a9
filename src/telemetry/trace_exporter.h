// Exports spans over OTLP/HTTP with the JSON encoding (POST <endpoint>, normally
// .../v1/traces) from a thread of its own. Workers write each span as OTLP JSON into
// their ExportBuffer (separator ','); this thread wraps up to max_batch_spans of them
// in one resourceSpans envelope per request. A collector that is down or slow costs
// the requests nothing: its batch is dropped and counted (traces are not billing; the
// usage records are the ones kept until delivered).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "config/telemetry_config.h"
#include "http/http_url.h"
#include "net/http_client.h"
#include "telemetry/export_queue.h"

namespace tahua {

class TraceExporter {
 public:
  // nullptr (and `error`) when the endpoint is not a usable http(s):// URL.
  static std::unique_ptr<TraceExporter> start(const TracingConfig& config, std::string& error);
  ~TraceExporter();  // exports what is queued (bounded by the timeout), then stops

  ExportQueue& queue() { return queue_; }

  struct Stats {
    std::uint64_t exported = 0;  // spans the collector accepted
    std::uint64_t dropped = 0;   // queue full, or the export failed
    std::uint64_t failures = 0;  // export requests that failed
    std::size_t depth = 0;       // spans waiting
  };
  Stats stats() const;

 private:
  TraceExporter(const TracingConfig& config, HttpUrl url);
  void run();
  void send(std::string& body, std::size_t count);  // consumes `body`

  TracingConfig config_;
  HttpUrl url_;
  std::string envelope_head_;
  ExportQueue queue_;
  std::atomic<std::uint64_t> exported_{0};
  std::atomic<std::uint64_t> failed_spans_{0};
  std::atomic<std::uint64_t> failures_{0};
  BlockingHttpClient http_;  // the thread's, with its kept-alive connection to the collector
  std::thread thread_;
};

}  // namespace tahua
