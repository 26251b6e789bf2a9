#include "telemetry/trace_exporter.h"

#include "core/log.h"
#include "telemetry/export_post.h"
#include "telemetry/json_out.h"

namespace tahua {

std::unique_ptr<TraceExporter> TraceExporter::start(const TracingConfig& config, std::string& error) {
  auto url = parseHttpUrl(config.endpoint, &error, true);
  if (!url) return nullptr;
  return std::unique_ptr<TraceExporter>(new TraceExporter(config, std::move(*url)));
}

TraceExporter::TraceExporter(const TracingConfig& config, HttpUrl url)
    : config_(config), url_(std::move(url)), queue_(config.max_queue_spans) {
  // {"resourceSpans":[{"resource":{...},"scopeSpans":[{"scope":{...},"spans":[ ... ]}]}]}
  envelope_head_ = R"({"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":)";
  json_out::string(envelope_head_, config.service_name);
  envelope_head_ += R"(}}]},"scopeSpans":[{"scope":{"name":"tahua"},"spans":[)";
  thread_ = std::thread([this] { run(); });
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
  // The request body is built in place: the envelope, then the workers' spans as they
  // came (each batch is whole spans separated by ','), then the envelope's end.
  std::string body;
  std::size_t count = 0;
  for (;;) {
    auto batches = queue_.take(config_.flush_interval);
    if (batches.empty() && queue_.closed()) break;
    for (auto& b : batches) {
      if (count > 0 && count + b.items > config_.max_batch_spans) {
        send(body, count);
        count = 0;
      }
      if (count == 0) body.assign(envelope_head_);
      body.append(b.data);
      count += b.items;
    }
    if (count > 0) {
      send(body, count);
      count = 0;
    }
  }
}

void TraceExporter::send(std::string& body, std::size_t count) {
  if (!body.empty() && body.back() == ',') body.pop_back();
  body.append("]}]}]}", 6);
  const OutboundResponse r = http_.fetch(exportPost(url_, config_.headers, std::move(body), config_.timeout));
  body = std::string();
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
