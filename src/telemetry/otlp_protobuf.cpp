#include "telemetry/otlp_protobuf.h"

#include <google/protobuf/arena.h>

#include "otlp_trace.pb.h"  // generated (CMakeLists.txt)

namespace tahua {
namespace {

namespace pb = tahua::otlp;

// Each request is built on an arena: its messages are bump allocations, freed at once
// by Reset() after serializing. The arena's first block is kept for the exporter's life
// (Reset keeps a block the arena was given), so a steady export barely allocates; a
// request message kept and cleared instead would free and re-allocate every attribute's
// value (a singular sub-message is deleted by Clear without an arena).
class OtlpProtobufEncoder final : public SpanEncoder, private SpanSink {
 public:
  explicit OtlpProtobufEncoder(std::string_view service_name)
      : service_name_(service_name), block_(new char[kBlockBytes]), arena_(block_.get(), kBlockBytes) {
    start();
  }

  std::string_view contentType() const override { return "application/x-protobuf"; }

  void add(const SpanRecordReader& record) override { describeSpans(record, *this); }

  void finish(std::string& body) override {
    request_->SerializeToString(&body);
    arena_.Reset();
    start();
  }

 private:
  static constexpr std::size_t kBlockBytes = 256 * 1024;
  static const char* bytes(const std::uint8_t* p) { return reinterpret_cast<const char*>(p); }

  // A new request: the resource (service.name) and the scope, spans to come.
  void start() {
    request_ = google::protobuf::Arena::CreateMessage<pb::ExportTraceServiceRequest>(&arena_);
    pb::ResourceSpans* rs = request_->add_resource_spans();
    pb::KeyValue* name = rs->mutable_resource()->add_attributes();
    name->set_key("service.name");
    name->mutable_value()->set_string_value(service_name_);
    pb::ScopeSpans* ss = rs->add_scope_spans();
    ss->mutable_scope()->set_name("tahua");
    spans_ = ss->mutable_spans();
  }

  void beginSpan(const SpanHead& h) override {
    span_ = spans_->Add();
    span_->set_trace_id(bytes(h.trace_id->data()), h.trace_id->size());
    span_->set_span_id(bytes(h.span_id->data()), h.span_id->size());
    if (h.parent_id) span_->set_parent_span_id(bytes(h.parent_id->data()), h.parent_id->size());
    std::string* name = span_->mutable_name();
    name->assign(h.name);
    if (!h.name2.empty()) name->append(1, ' ').append(h.name2);
    span_->set_kind(static_cast<pb::Span::SpanKind>(h.kind));
    span_->set_start_time_unix_nano(static_cast<std::uint64_t>(h.start_ns));
    span_->set_end_time_unix_nano(static_cast<std::uint64_t>(h.end_ns));
  }
  pb::AnyValue* attribute(std::string_view key) {
    pb::KeyValue* kv = span_->add_attributes();
    kv->set_key(key.data(), key.size());
    return kv->mutable_value();
  }
  void str(std::string_view key, std::string_view value) override { attribute(key)->set_string_value(value.data(), value.size()); }
  void integer(std::string_view key, std::int64_t value) override { attribute(key)->set_int_value(value); }
  void dbl(std::string_view key, double value) override { attribute(key)->set_double_value(value); }
  void boolean(std::string_view key, bool value) override { attribute(key)->set_bool_value(value); }
  void strList(std::string_view key, std::string_view value) override {
    attribute(key)->mutable_array_value()->add_values()->set_string_value(value.data(), value.size());
  }
  void endSpan(std::string_view event_name, std::int64_t event_ns, bool error, std::string_view message) override {
    if (!event_name.empty()) {
      pb::Span::Event* e = span_->add_events();
      e->set_time_unix_nano(static_cast<std::uint64_t>(event_ns));
      e->set_name(event_name.data(), event_name.size());
    }
    // Present on every span, as in the JSON encoding (an empty Status is UNSET).
    pb::Status* status = span_->mutable_status();
    if (error) {
      status->set_code(pb::Status::STATUS_CODE_ERROR);
      status->set_message(message.data(), message.size());
    }
  }

  std::string service_name_;
  std::unique_ptr<char[]> block_;
  google::protobuf::Arena arena_;
  pb::ExportTraceServiceRequest* request_ = nullptr;  // on arena_
  google::protobuf::RepeatedPtrField<pb::Span>* spans_ = nullptr;
  pb::Span* span_ = nullptr;
};

}  // namespace

std::unique_ptr<SpanEncoder> makeOtlpProtobufEncoder(std::string_view service_name) {
  return std::make_unique<OtlpProtobufEncoder>(service_name);
}

}  // namespace tahua
