#include "telemetry/trace_exporter.h"

#include "core/log.h"
#include "telemetry/export_post.h"
#include "telemetry/otlp_json.h"
#include "telemetry/otlp_protobuf.h"
#include "telemetry/span_record.h"
#include "core/thread_name.h"

namespace tahua {

std::unique_ptr<TraceExporter> TraceExporter::start(const TracingConfig& config, std::string& error) {
  auto url = parseHttpUrl(config.endpoint, &error, true);
  if (!url) return nullptr;
  return std::unique_ptr<TraceExporter>(new TraceExporter(config, std::move(*url)));
}

TraceExporter::TraceExporter(const TracingConfig& config, HttpUrl url)
    : config_(config),
      url_(std::move(url)),
      encoder_(config.protocol == TracingConfig::Protocol::Json ? makeOtlpJsonEncoder(config.service_name)
                                                                  : makeOtlpProtobufEncoder(config.service_name)),
      queue_(config.max_queue_spans) {
  thread_ = std::thread([this] {
    nameThisThread("tahua-traces");
    run();
  });
}

TraceExporter::~TraceExporter() {
  queue_.close();
  if (thread_.joinable()) thread_.join();
}

TraceExporter::Stats TraceExporter::stats() const {
  Stats s;
  s.exported = exported_.load(std::memory_order_relaxed);
  s.dropped = queue_.dropped() + failed_spans_.load(std::memory_order_relaxed);
  s.failures = failures_.load(std::memory_order_relaxed);
  s.depth = queue_.depth();
  return s;
}

void TraceExporter::run() {
  // Records are encoded as they come; a request holds up to max_batch_spans spans (a
  // record's spans are never split over two).
  std::size_t count = 0;
  for (;;) {
    auto batches = queue_.take(config_.flush_interval);
    if (batches.empty() && queue_.closed()) break;
    for (auto& b : batches) {
      SpanRecordReader records(b.data.view());
      while (records.next()) {
        const std::size_t spans = spanCount(records.server());
        if (count > 0 && count + spans > config_.max_batch_spans) {
          send(count);
          count = 0;
        }
        encoder_->add(records);
        count += spans;
      }
    }
    if (count > 0) {
      send(count);
      count = 0;
    }
    queue_.recycle(batches);
  }
}

void TraceExporter::send(std::size_t count) {
  std::string body;
  encoder_->finish(body);
  const OutboundResponse r = http_.fetch(exportPost(url_, config_.headers, std::move(body), config_.timeout, encoder_->contentType()));
  if (r.status >= 200 && r.status < 300) {
    exported_.fetch_add(count, std::memory_order_relaxed);
    return;
  }
  failed_spans_.fetch_add(count, std::memory_order_relaxed);
  // The first failure and every 100th after it are logged, not every batch.
  if (failures_.fetch_add(1, std::memory_order_relaxed) % 100 == 0)
    log::warn("trace export failed; spans dropped", {{"endpoint", config_.endpoint},
                                                      {"error", r.status ? "HTTP " + std::to_string(r.status) : r.error}});
}

}  // namespace tahua
