#include "telemetry/otlp_json.h"

#include "telemetry/json_out.h"
#include "telemetry/trace_context.h"

namespace tahua {
namespace {

// {"resourceSpans":[{"resource":{...},"scopeSpans":[{"scope":{...},"spans":[ ... ]}]}]}
// Attributes are {"key":k,"value":{"<type>Value":v}}.
class OtlpJsonEncoder final : public SpanEncoder, private SpanSink {
 public:
  explicit OtlpJsonEncoder(std::string_view service_name) {
    head_ = R"({"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":)";
    json_out::string(head_, service_name);
    head_ += R"(}}]},"scopeSpans":[{"scope":{"name":"tahua"},"spans":[)";
  }

  std::string_view contentType() const override { return "application/json"; }

  void add(const SpanRecordReader& record) override {
    if (out_.empty()) out_.raw(head_);
    describeSpans(record, *this);
  }

  void finish(std::string& body) override {
    if (out_.empty()) out_.raw(head_);
    if (out_.back() == ',') out_.pop_back();
    out_.raw("]}]}]}", 6);
    body.assign(out_.data(), out_.size());
    out_.clear();
  }

 private:
  void beginSpan(const SpanHead& h) override {
    char hex[32];
    out_.raw(std::string_view("{\"traceId\":\""));
    toHex(h.trace_id->data(), 16, hex);
    out_.raw(hex, 32);
    out_.raw(std::string_view("\",\"spanId\":\""));
    toHex(h.span_id->data(), 8, hex);
    out_.raw(hex, 16);
    out_.push_back('"');
    if (h.parent_id) {
      out_.raw(std::string_view(",\"parentSpanId\":\""));
      toHex(h.parent_id->data(), 8, hex);
      out_.raw(hex, 16);
      out_.push_back('"');
    }
    out_.raw(std::string_view(",\"name\":\""));
    json_out::escaped(out_, h.name);
    if (!h.name2.empty()) {
      out_.push_back(' ');
      json_out::escaped(out_, h.name2);
    }
    out_.raw(std::string_view("\",\"kind\":"));
    json_out::integer(out_, static_cast<int>(h.kind));
    out_.raw(std::string_view(",\"startTimeUnixNano\":\""));
    json_out::integer(out_, h.start_ns);
    out_.raw(std::string_view("\",\"endTimeUnixNano\":\""));
    json_out::integer(out_, h.end_ns);
    out_.raw(std::string_view("\",\"attributes\":["));
    first_ = true;
  }
  void str(std::string_view key, std::string_view value) override {
    open(key);
    out_.raw(std::string_view("{\"stringValue\":"));
    json_out::string(out_, value);
    out_.raw(std::string_view("}}"));
  }
  void integer(std::string_view key, std::int64_t value) override {
    open(key);
    out_.raw(std::string_view("{\"intValue\":\""));
    json_out::integer(out_, value);
    out_.raw(std::string_view("\"}}"));
  }
  void strList(std::string_view key, std::string_view value) override {
    open(key);
    out_.raw(std::string_view("{\"arrayValue\":{\"values\":[{\"stringValue\":"));
    json_out::string(out_, value);
    out_.raw(std::string_view("}]}}}"));
  }
  void dbl(std::string_view key, double value) override {
    open(key);
    out_.raw(std::string_view("{\"doubleValue\":"));
    json_out::number(out_, value);
    out_.raw(std::string_view("}}"));
  }
  void boolean(std::string_view key, bool value) override {
    open(key);
    out_.raw(value ? std::string_view("{\"boolValue\":true}}") : std::string_view("{\"boolValue\":false}}"));
  }
  void endSpan(std::string_view event_name, std::int64_t event_ns, bool error, std::string_view message) override {
    out_.push_back(']');
    if (!event_name.empty()) {
      out_.raw(std::string_view(",\"events\":[{\"name\":"));
      json_out::string(out_, event_name);
      out_.raw(std::string_view(",\"timeUnixNano\":\""));
      json_out::integer(out_, event_ns);
      out_.raw(std::string_view("\"}]"));
    }
    if (error) {
      out_.raw(std::string_view(",\"status\":{\"code\":2,\"message\":"));
      json_out::string(out_, message);
      out_.raw(std::string_view("}},"));
    } else {
      out_.raw(std::string_view(",\"status\":{\"code\":0}},"));
    }
  }

  void open(std::string_view key) {
    if (first_) out_.raw("{\"key\":\"", 8);
    else out_.raw(",{\"key\":\"", 9);
    first_ = false;
    out_.raw(key.data(), key.size());
    out_.raw("\",\"value\":", 10);
  }

  std::string head_;
  JsonBuf out_;  // the request being built, kept across requests: its memory is reused
  bool first_ = true;
};

}  // namespace

std::unique_ptr<SpanEncoder> makeOtlpJsonEncoder(std::string_view service_name) {
  return std::make_unique<OtlpJsonEncoder>(service_name);
}

}  // namespace tahua
