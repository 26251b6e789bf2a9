#include "telemetry/span_record.h"

#include <chrono>
#include <type_traits>

namespace tahua {

static_assert(std::is_trivially_copyable_v<ServerSpan> && std::is_trivially_copyable_v<AttemptSpan>,
              "records are copied as bytes");

void SpanRecordWriter::write(JsonBuf& out, ServerSpan& server, const AttemptSpan* attempts) {
  server.size = offset_;
  char* p = out.reserve(offset_);
  std::memcpy(p, &server, sizeof server);
  char* at = p + sizeof server;
  const std::size_t attempt_bytes = server.kept * sizeof(AttemptSpan);
  if (attempt_bytes) std::memcpy(at, attempts, attempt_bytes);
  at += attempt_bytes;
  for (std::size_t i = 0; i < count_; ++i) {
    if (texts_[i].empty()) continue;
    std::memcpy(at, texts_[i].data(), texts_[i].size());
    at += texts_[i].size();
  }
  out.advance(at);
}

bool SpanRecordReader::next() {
  if (rest_.size() < sizeof(ServerSpan)) return false;
  std::memcpy(&server_, rest_.data(), sizeof server_);
  if (server_.size > rest_.size() || server_.size < sizeof(ServerSpan) + server_.kept * sizeof(AttemptSpan)) return false;
  record_ = rest_.substr(0, server_.size);
  rest_.remove_prefix(server_.size);
  return true;
}

std::int64_t unixNanosFromSteady(std::int64_t steady_ns) {
  using namespace std::chrono;
  static const std::int64_t offset = duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count() -
                                     duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
  return steady_ns + offset;
}

}  // namespace tahua
