// The OTLP protobuf writer (telemetry/otlp_protobuf.cpp) read back by protobuf's own
// parser, with classes protoc generated from telemetry/otlp_trace.proto: the wire format
// is right, and every span says what its JSON encoding says. (The integration tests
// decode the same bytes with OpenTelemetry JS's decoders.)
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <map>

#include "otlp_trace.pb.h"  // generated (CMakeLists.txt)
#include "telemetry/otlp_json.h"
#include "telemetry/otlp_protobuf.h"
#include "telemetry/span_record.h"

namespace tahua {
namespace otlp_protobuf_test {

// One request's record: a server span (failed, streamed, every kind of attribute) and
// two attempts, the first failed.
std::string record(std::int64_t max_tokens) {
  SpanRecordWriter w(2);
  ServerSpan s;
  s.kept = 2;
  s.continued = true;
  s.failed = true;
  s.streaming = true;
  s.has_endpoint = true;
  for (std::uint8_t i = 0; i < 16; ++i) s.trace_id[i] = static_cast<std::uint8_t>(0xa0 + i);
  s.span_id = {1, 2, 3, 4, 5, 6, 7, 8};
  s.parent_id = {9, 9, 9, 9, 9, 9, 9, 9};
  s.start_ns = 1'767'225'600'000'000'000;
  s.first_byte_ns = s.start_ns + 250'000'000;
  s.end_ns = s.start_ns + 1'000'000'000;
  s.status = 502;
  s.attempts = 2;
  s.max_tokens = max_tokens;
  s.prompt_tokens = 12;
  s.completion_tokens = 0;
  s.temperature = 0.25;
  s.operation = std::string_view("chat");
  s.end_reason = std::string_view("upstream_error");
  s.error = std::string_view("upstream_stream_interrupted");
  s.finish_reason = std::string_view("length");
  s.method = w.text("POST");
  s.path = w.text("/v1/chat/completions");
  s.request_id = w.text("req-1");
  s.request_model = w.text("m");
  s.provider_type = w.text("azure");
  static const std::string long_model(300, 'r');  // a length of two varint bytes
  s.response_model = w.text(long_model);  // (the writer keeps views until write())
  s.deployment_id = w.text("d1");
  s.deployment_version = w.text("canary");
  std::array<AttemptSpan, 2> a;
  for (int i = 0; i < 2; ++i) {
    a[i].span_id = {static_cast<std::uint8_t>(0x10 + i), 0, 0, 0, 0, 0, 0, 1};
    a[i].start_ns = s.start_ns + 1000 * (i + 1);
    a[i].end_ns = s.end_ns - 1000 * (2 - i);
    a[i].status = i == 0 ? 503 : 200;
    a[i].has_provider = a[i].has_deployment = true;
    a[i].port = 443;
    a[i].provider_type = w.text("azure");
    a[i].provider_host = w.text("api.example");
    a[i].provider_name = w.text("up");
    a[i].upstream_model = w.text("gpt-x");
    a[i].deployment_id = w.text("d1");
    a[i].deployment_version = w.text("canary");
  }
  a[1].first_byte_ns = a[1].start_ns + 5;
  JsonBuf out;
  w.write(out, s, a.data());
  return std::string(out.view());
}

std::string encode(SpanEncoder& e, const std::string& records) {
  SpanRecordReader r(records);
  while (r.next()) e.add(r);
  std::string body;
  e.finish(body);
  return body;
}

std::string hex(std::string_view b) {
  static constexpr char d[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) s += {d[c >> 4], d[c & 15]};
  return s;
}

// An AnyValue as the OTLP JSON mapping writes it, to compare the two encodings.
boost::json::value json(const otlp::AnyValue& v) {
  switch (v.value_case()) {
    case otlp::AnyValue::kStringValue: return {{"stringValue", v.string_value()}};
    case otlp::AnyValue::kIntValue: return {{"intValue", std::to_string(v.int_value())}};
    case otlp::AnyValue::kDoubleValue: return {{"doubleValue", v.double_value()}};
    case otlp::AnyValue::kBoolValue: return {{"boolValue", v.bool_value()}};
    case otlp::AnyValue::kArrayValue: {
      boost::json::array values;
      for (const auto& item : v.array_value().values()) values.push_back(json(item));
      return {{"arrayValue", {{"values", values}}}};
    }
    default: return nullptr;
  }
}

TEST(OtlpProtobuf, ProtobufsParserReadsWhatTheWriterWrote) {
  const std::string records = record(50) + record(0);  // two requests in one body
  const std::string body = encode(*makeOtlpProtobufEncoder("svc"), records);
  otlp::ExportTraceServiceRequest req;
  ASSERT_TRUE(req.ParseFromString(body));
  ASSERT_EQ(req.resource_spans_size(), 1);
  const auto& rs = req.resource_spans(0);
  ASSERT_EQ(rs.resource().attributes_size(), 1);
  EXPECT_EQ(rs.resource().attributes(0).key(), "service.name");
  EXPECT_EQ(rs.resource().attributes(0).value().string_value(), "svc");
  ASSERT_EQ(rs.scope_spans_size(), 1);
  EXPECT_EQ(rs.scope_spans(0).scope().name(), "tahua");
  const auto& spans = rs.scope_spans(0).spans();
  ASSERT_EQ(spans.size(), 6);
  const otlp::Span& server = spans[0];
  EXPECT_EQ(hex(server.trace_id()), "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf");
  EXPECT_EQ(hex(server.span_id()), "0102030405060708");
  EXPECT_EQ(hex(server.parent_span_id()), "0909090909090909");
  EXPECT_EQ(server.name(), "POST /v1/chat/completions");
  EXPECT_EQ(server.kind(), otlp::Span::SPAN_KIND_SERVER);
  EXPECT_EQ(server.start_time_unix_nano(), 1'767'225'600'000'000'000u);
  EXPECT_EQ(server.end_time_unix_nano() - server.start_time_unix_nano(), 1'000'000'000u);
  EXPECT_EQ(server.status().code(), otlp::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(server.status().message(), "upstream_stream_interrupted");
  ASSERT_EQ(server.events_size(), 1);
  EXPECT_EQ(server.events(0).name(), "gen_ai.first_token");
  EXPECT_EQ(server.events(0).time_unix_nano() - server.start_time_unix_nano(), 250'000'000u);
  std::map<std::string, const otlp::AnyValue*> a;
  for (const auto& kv : server.attributes()) a[kv.key()] = &kv.value();
  EXPECT_EQ(a.at("gen_ai.provider.name")->string_value(), "azure.ai.openai");
  EXPECT_EQ(a.at("gen_ai.response.model")->string_value(), std::string(300, 'r'));
  EXPECT_EQ(a.at("gen_ai.request.max_tokens")->int_value(), 50);
  EXPECT_EQ(a.at("gen_ai.usage.output_tokens")->int_value(), 0);
  EXPECT_EQ(a.at("gen_ai.request.temperature")->double_value(), 0.25);
  EXPECT_EQ(a.at("gen_ai.server.time_to_first_token")->double_value(), 0.25);
  EXPECT_TRUE(a.at("tahua.stream")->bool_value());
  ASSERT_EQ(a.at("gen_ai.response.finish_reasons")->array_value().values_size(), 1);
  EXPECT_EQ(a.at("gen_ai.response.finish_reasons")->array_value().values(0).string_value(), "length");
  const otlp::Span& failed = spans[1];
  EXPECT_EQ(failed.kind(), otlp::Span::SPAN_KIND_CLIENT);
  EXPECT_EQ(failed.name(), "chat gpt-x");
  EXPECT_EQ(failed.parent_span_id(), server.span_id());
  EXPECT_EQ(failed.status().code(), otlp::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(failed.events_size(), 0);
  EXPECT_EQ(spans[2].status().code(), otlp::Status::STATUS_CODE_UNSET);
  EXPECT_TRUE(spans[2].has_status()) << "written on every span, as JSON does";
  EXPECT_EQ(spans[2].events(0).name(), "tahua.response_headers");
  std::map<std::string, const otlp::AnyValue*> b;
  for (const auto& kv : spans[2].attributes()) b[kv.key()] = &kv.value();
  EXPECT_EQ(b.at("server.port")->int_value(), 443);
  EXPECT_EQ(b.at("server.address")->string_value(), "api.example");
  // The second request's server span.
  std::map<std::string, const otlp::AnyValue*> c;
  for (const auto& kv : spans[3].attributes()) c[kv.key()] = &kv.value();
  EXPECT_EQ(c.count("gen_ai.request.max_tokens"), 0u) << "0: not asked for, not written";
  EXPECT_EQ(spans[3].trace_id(), server.trace_id());

  // Span for span, attribute for attribute, what the JSON encoding says.
  const boost::json::value j = boost::json::parse(encode(*makeOtlpJsonEncoder("svc"), records));
  const auto& jspans = j.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").as_array();
  ASSERT_EQ(jspans.size(), static_cast<std::size_t>(spans.size()));
  for (int i = 0; i < spans.size(); ++i) {
    const auto& js = jspans[static_cast<std::size_t>(i)].as_object();
    EXPECT_EQ(js.at("spanId").as_string(), hex(spans[i].span_id()));
    EXPECT_EQ(js.at("name").as_string(), spans[i].name());
    EXPECT_EQ(js.at("endTimeUnixNano").as_string(), std::to_string(spans[i].end_time_unix_nano()));
    EXPECT_EQ(js.at("status").at("code").as_int64(), spans[i].status().code());
    const auto& attrs = js.at("attributes").as_array();
    ASSERT_EQ(attrs.size(), static_cast<std::size_t>(spans[i].attributes_size())) << "span " << i;
    for (int k = 0; k < spans[i].attributes_size(); ++k) {
      const auto& kv = spans[i].attributes(k);
      EXPECT_EQ(attrs[static_cast<std::size_t>(k)].at("key").as_string(), kv.key());
      EXPECT_EQ(attrs[static_cast<std::size_t>(k)].at("value"), json(kv.value())) << kv.key();
    }
  }
}

}  // namespace otlp_protobuf_test
}  // namespace tahua
