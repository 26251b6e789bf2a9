// Exports spans over OTLP/HTTP (POST <endpoint>, normally .../v1/traces) from a thread
// of its own. Workers write each traced request as a compact record (span_record.h)
// into their ExportBuffer; this thread encodes up to max_batch_spans spans per request
// (otlp_spans.h: protobuf or JSON, `tracing.protocol`). A collector that is down or
// slow costs the requests nothing: its batch is dropped and counted (traces are not
// billing; the usage records are the ones kept until delivered).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "config/telemetry_config.h"
#include "http/http_url.h"
#include "net/http_client.h"
#include "telemetry/export_queue.h"
#include "telemetry/otlp_spans.h"

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
  void send(std::size_t count);  // the encoder's spans

  TracingConfig config_;
  HttpUrl url_;
  std::unique_ptr<SpanEncoder> encoder_;  // used by the thread only
  ExportQueue queue_;
  std::atomic<std::uint64_t> exported_{0};
  std::atomic<std::uint64_t> failed_spans_{0};
  std::atomic<std::uint64_t> failures_{0};
  BlockingHttpClient http_;  // the thread's, with its kept-alive connection to the collector
  std::thread thread_;
};

}  // namespace tahua
