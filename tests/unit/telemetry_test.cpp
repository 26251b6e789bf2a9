// Traces and usage records without sockets: trace context parsing, ids, the JSON
// appender, the export queue's bound, and the tracing and usage filters driven through
// a FilterChain.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <unistd.h>

#include "filters/access_log/access_log_filter.h"
#include "filters/filter.h"
#include "filters/tracing/tracing_filter.h"
#include "filters/usage/usage_filter.h"
#include "telemetry/access_log_entry.h"
#include "telemetry/export_queue.h"
#include "telemetry/json_out.h"
#include "telemetry/otlp_json.h"
#include "telemetry/span_record.h"
#include "telemetry/trace_context.h"
#include "telemetry/usage_record.h"

namespace tahua {
namespace telemetry_test {  // named, not anonymous: eight test files compile as one unit

struct Block {
  explicit Block(const FilterChain& chain) : storage(chain.stateBytes() / sizeof(std::max_align_t) + 2) {}
  std::byte* get() { return reinterpret_cast<std::byte*>(storage.data()); }
  std::vector<std::max_align_t> storage;
};

class Headers final : public HeaderView {
 public:
  std::map<std::string, std::string> h;
  std::string_view get(std::string_view name) const override {
    auto it = h.find(std::string(name));
    return it == h.end() ? std::string_view{} : std::string_view(it->second);
  }
};

std::string hex(const std::uint8_t* b, std::size_t n) {
  std::string s(2 * n, '0');
  toHex(b, n, s.data());
  return s;
}


TEST(TraceContext, ParsesVersion00AndRefusesWhatTheSpecRefuses) {
  TraceContext t;
  ASSERT_TRUE(parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", t));
  EXPECT_EQ(hex(t.trace_id.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(hex(t.parent_id.data(), 8), "00f067aa0ba902b7");
  EXPECT_TRUE(t.sampled);
  ASSERT_TRUE(parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", t));
  EXPECT_FALSE(t.sampled);
  // A later version: its first four fields are read, more may follow after a dash.
  EXPECT_TRUE(parseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", t));
  for (std::string_view bad : {
           "",
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // zero parent
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // uppercase
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 has exactly 55
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
       }) {
    TraceContext u;
    EXPECT_FALSE(parseTraceparent(bad, u)) << bad;
  }
}

TEST(TraceContext, FormatsWhatItParses) {
  TraceContext t;
  ASSERT_TRUE(parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", t));
  std::array<std::uint8_t, 8> span{1, 2, 3, 4, 5, 6, 7, 8};
  char out[55];
  formatTraceparent(t, span, out);
  EXPECT_EQ(std::string_view(out, 55), "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01");
}

TEST(TraceContext, UuidV7IsWellFormedUniqueAndSortsByTime) {
  std::set<std::string> seen;
  std::string previous;
  for (int i = 0; i < 1000; ++i) {
    char id[36];
    uuidV7(id);
    std::string s(id, 36);
    ASSERT_EQ(s[14], '7') << s;
    ASSERT_NE(std::string("89ab").find(s[19]), std::string::npos) << s;
    ASSERT_EQ(s[8], '-');
    EXPECT_TRUE(seen.insert(s).second);
    EXPECT_GE(s.substr(0, 13), previous.substr(0, std::min<std::size_t>(13, previous.size())));  // the millisecond prefix
    previous = s;
  }
}

TEST(JsonOut, EscapesAndParsesBack) {
  JsonBuf out;
  out.push_back('{');
  json_out::key(out, "s");
  json_out::string(out, std::string_view("a\"b\\c\nd\x01\xc3\xa9", 10));
  json_out::key(out, "long");  // past the 8-byte fast path, with an escape late in it
  json_out::string(out, "0123456789abcdefghij\"klmnopqrstuvwxyz0123456789");
  json_out::key(out, "n");
  json_out::number(out, 0.25);
  json_out::key(out, "i");
  json_out::integer(out, -42);
  json_out::key(out, "ms");
  json_out::millis(out, std::chrono::microseconds(12'340));
  json_out::key(out, "t");
  json_out::time(out, std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'123)));
  out.push_back('}');
  auto v = boost::json::parse(out.view()).as_object();
  EXPECT_EQ(v["s"].as_string(), std::string_view("a\"b\\c\nd\x01\xc3\xa9", 10));
  EXPECT_EQ(v["long"].as_string(), "0123456789abcdefghij\"klmnopqrstuvwxyz0123456789");
  EXPECT_EQ(v["n"].as_double(), 0.25);
  EXPECT_EQ(v["i"].as_int64(), -42);
  EXPECT_EQ(v["ms"].as_double(), 12.34);
  EXPECT_EQ(v["t"].as_string(), "2023-11-14T22:13:20.123Z");
}

TEST(JsonOut, EveryLengthAndEveryPlaceOfAnEscapeRoundTrips) {
  // The short strings' single word, the words of longer ones, and their last partial
  // word read as the string's last 8 bytes (rewriting bytes already written): lengths
  // 0-24, with no escape or one at each place, after other output.
  for (std::size_t len = 0; len <= 24; ++len)
    for (std::size_t at = 0; at <= len; ++at)  // at == len: nothing to escape
      for (char special : {'"', '\\', '\n', '\x01', '\x1f'}) {
        std::string text;
        for (std::size_t i = 0; i < len; ++i) text += static_cast<char>('a' + i % 26);
        if (at < len) text[at] = special;
        JsonBuf out;
        out.push_back('[');
        json_out::string(out, "before");
        out.push_back(',');
        json_out::string(out, text);
        out.push_back(']');
        const auto v = boost::json::parse(out.view()).as_array();
        ASSERT_EQ(v.at(0).as_string(), "before");
        ASSERT_EQ(v.at(1).as_string(), text) << "length " << len << ", escape at " << at;
        if (at == len) break;  // one pass suffices without an escape
      }
}

TEST(JsonOut, GrowsPastItsFirstBlock) {
  JsonBuf out;
  const std::string big(10000, 'x');
  for (int i = 0; i < 20; ++i) json_out::string(out, big);
  EXPECT_EQ(out.size(), 20u * 10002);
  EXPECT_EQ(out.view().substr(0, 3), "\"xx");
}

ExportBatch batchOf(std::string_view data, std::size_t items) {
  ExportBatch b;
  b.data.raw(data);
  b.items = items;
  return b;
}

TEST(ExportQueue, RefusesPastItsBoundAndCountsTheDrops) {
  ExportQueue q(300);
  EXPECT_TRUE(q.push(batchOf("a\n", 200)));
  EXPECT_FALSE(q.push(batchOf("b\n", 200)));  // 400 > 300: refused whole, never waited for
  EXPECT_EQ(q.depth(), 200u);
  EXPECT_EQ(q.dropped(), 200u);
  EXPECT_EQ(q.accepted(), 200u);
  auto taken = q.take(std::chrono::milliseconds(0));
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(q.depth(), 0u);
  q.close();
  EXPECT_FALSE(q.push(batchOf("c\n", 1)));
  EXPECT_TRUE(q.take(std::chrono::milliseconds(1000)).empty());  // closed: no wait
}

TEST(ExportQueue, BufferHandsOverAtItsThreshold) {
  ExportQueue q(100000);
  ExportBuffer b(&q, '\n');
  for (std::size_t i = 0; i < ExportBuffer::kFlushItems - 1; ++i) {
    b.data().push_back('x');
    b.commit();
  }
  EXPECT_EQ(q.depth(), 0u);
  b.data().push_back('x');
  b.commit();
  EXPECT_EQ(q.depth(), ExportBuffer::kFlushItems);
  auto taken = q.take(std::chrono::milliseconds(0));
  EXPECT_EQ(taken[0].data.size(), 2 * ExportBuffer::kFlushItems);
}

TEST(ExportQueue, BuffersMoveToTheExporterAndComeBackEmpty) {
  ExportQueue q(100000);
  ExportBuffer b(&q, '\n');
  b.data().raw(std::string_view("first"));
  b.commit();
  const char* const memory = b.data().data();
  b.flush();
  auto taken = q.take(std::chrono::milliseconds(0));
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].data.data(), memory) << "moved, not copied";
  EXPECT_EQ(taken[0].data.view(), "first\n");
  q.recycle(taken);
  EXPECT_TRUE(taken.empty());
  b.data().raw(std::string_view("second"));
  b.commit();
  b.flush();  // hands this buffer over and gets the first one back
  EXPECT_EQ(b.data().data(), memory);
  EXPECT_TRUE(b.data().empty());
  taken = q.take(std::chrono::milliseconds(0));
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].data.view(), "second\n");
}


struct TelemetryFixture {
  TelemetryFixture() {
    auto c = std::make_shared<Config>();
    c->tracing.enabled = true;
    c->tracing.endpoint = "http://127.0.0.1:1/v1/traces";
    c->usage.gateway_id = "gw-test";
    provider.name = "up";
    provider.type = "anthropic";
    provider.host = "api.example";
    provider.port = 443;
    model.name = "m";
    deployment.id = "d1";
    deployment.upstream_model = "claude-x";
    deployment.version = "canary";
    config = c;
    chain.add(makeUsageFilter(*config, records, nullptr));
    chain.add(makeTracingFilter(*config, spans));
  }
  void begin(RequestContext& ctx, Block& block) {
    ctx.config = config;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.method = "POST";
    ctx.path = "/v1/chat/completions";
    ctx.request_id = "req-1";
    ctx.headers = &headers;
    ctx.start = std::chrono::steady_clock::now();
    chain.begin(ctx, block.get());
  }
  // Usage records, formatted as the exporter does: JSON lines.
  std::vector<boost::json::object> drain(ExportQueue& q) {
    std::vector<boost::json::object> out;
    for (auto& b : q.take(std::chrono::milliseconds(0))) {
      JsonBuf lines;
      formatUsageRecords(b.data.view(), lines);
      std::string_view rest = lines.view();
      for (auto end = rest.find('\n'); end != std::string_view::npos; end = rest.find('\n')) {
        out.push_back(boost::json::parse(rest.substr(0, end)).as_object());
        rest.remove_prefix(end + 1);
      }
    }
    return out;
  }
  // Spans: the workers' records, encoded as the exporter would with the JSON encoding.
  std::vector<boost::json::object> drainSpans() {
    auto encoder = makeOtlpJsonEncoder("tahua");
    std::size_t count = 0;
    for (auto& b : span_queue.take(std::chrono::milliseconds(0))) {
      SpanRecordReader r(b.data.view());
      while (r.next()) {
        encoder->add(r);
        count += spanCount(r.server());
      }
    }
    std::string body;
    encoder->finish(body);
    std::vector<boost::json::object> out;
    const boost::json::value request = boost::json::parse(body);
    for (const auto& span : request.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").as_array())
      out.push_back(span.as_object());
    EXPECT_EQ(out.size(), count);
    return out;
  }
  ConfigPtr config;
  ProviderConfig provider;
  ModelConfig model;
  DeploymentConfig deployment;
  Headers headers;
  ExportQueue span_queue{100000}, record_queue{100000};
  ExportBuffer spans{&span_queue, 0};
  ExportBuffer records{&record_queue, 0};
  FilterChain chain;
};

void answeredBy(TelemetryFixture& f, RequestContext& ctx) {
  ctx.model = &f.model;
  ctx.deployment = &f.deployment;
  ctx.provider = &f.provider;
  ctx.facts.model = "m";
}


TEST(TracingFilter, ContinuesTheTraceAndAddsTraceparentToEachAttempt) {
  TelemetryFixture f;
  f.headers.h["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  Block block(f.chain);
  RequestContext ctx;
  f.begin(ctx, block);
  std::size_t next = 0;
  ASSERT_EQ(f.chain.run(RequestPhase::Headers, ctx, next), FilterStatus::Continue);
  EXPECT_EQ(hex(ctx.trace.trace_id.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  answeredBy(f, ctx);
  std::string lines;
  UpstreamRequestHeaders h(lines);
  f.chain.upstreamRequest(ctx, h);
  EXPECT_EQ(lines.substr(0, 49), "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-");
  EXPECT_EQ(lines.size(), std::string("traceparent: ").size() + 55 + 2);
  ctx.status = 503;
  f.chain.attemptFailed(ctx);
  std::string again;
  UpstreamRequestHeaders h2(again);
  f.chain.upstreamRequest(ctx, h2);
  EXPECT_NE(again, lines) << "each attempt is its own span";
  ctx.status = 200;
  ctx.end = std::chrono::steady_clock::now();
  f.chain.complete(ctx);
  f.spans.flush();
  auto spans = f.drainSpans();
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0]["kind"].as_int64(), 2);
  EXPECT_EQ(spans[0]["parentSpanId"].as_string(), "00f067aa0ba902b7");
  EXPECT_EQ(spans[1]["kind"].as_int64(), 3);
  EXPECT_EQ(spans[1]["name"].as_string(), "chat claude-x");
  EXPECT_EQ(spans[1]["parentSpanId"], spans[0]["spanId"]);
  EXPECT_EQ(spans[1]["status"].as_object().at("code").as_int64(), 2) << "the 503 attempt";
  EXPECT_EQ(spans[2]["status"].as_object().at("code").as_int64(), 0);
  bool provider_named = false;
  for (const auto& a : spans[0]["attributes"].as_array())
    if (a.as_object().at("key") == "gen_ai.provider.name") provider_named = a.as_object().at("value").as_object().at("stringValue") == "anthropic";
  EXPECT_TRUE(provider_named);
}

TEST(UsageFilter, ACutStreamIsBilledWhatWasDeliveredAndOneRecordIsWritten) {
  TelemetryFixture f;
  Block block(f.chain);
  RequestContext ctx;
  f.begin(ctx, block);
  std::size_t next = 0;
  ASSERT_EQ(f.chain.run(RequestPhase::Headers, ctx, next), FilterStatus::Continue);  // a trace is started
  answeredBy(f, ctx);
  ctx.bytes_in = 400;  // the prompt estimate: 100 tokens
  ctx.status = 200;
  ctx.streaming = true;
  ctx.first_byte = std::chrono::steady_clock::now();
  ResponseData piece(R"(data: {"choices":[{"delta":{"content":"Hello there, how are you today?"}}]})" "\n\n", false);
  f.chain.responseData(ctx, piece);
  ctx.bytes_out = piece.bytes().size();
  ctx.status = 499;  // the client went away; no usage came
  ctx.end = std::chrono::steady_clock::now();
  f.chain.complete(ctx);
  EXPECT_EQ(ctx.usage.prompt_tokens, 100);
  EXPECT_GT(ctx.usage.completion_tokens, 3);
  EXPECT_LT(ctx.usage.completion_tokens, 12);
  f.records.flush();
  auto records = f.drain(f.record_queue);
  ASSERT_EQ(records.size(), 1u);
  auto& r = records[0];
  EXPECT_EQ(r["end_reason"].as_string(), "client_gone");
  EXPECT_EQ(r["usage_source"].as_string(), "estimate");
  EXPECT_EQ(r["completion_tokens"].as_int64(), ctx.usage.completion_tokens);
  EXPECT_EQ(r["gateway"].as_string(), "gw-test");
  EXPECT_EQ(r["version"].as_string(), "canary");
  EXPECT_EQ(r["trace_id"].as_string().size(), 32u);
  EXPECT_EQ(r["record_id"].as_string().size(), 36u);
}

TEST(UsageFilter, NothingDeliveredIsNothingBilledAnd401sHaveNoRecord) {
  TelemetryFixture f;
  {
    Block block(f.chain);
    RequestContext ctx;
    f.begin(ctx, block);
    answeredBy(f, ctx);
    ctx.status = 502;
    ctx.fail(Error{ErrorKind::UpstreamConnect, "down"});
    ctx.end = ctx.start;
    f.chain.complete(ctx);
    EXPECT_FALSE(ctx.usage.present());
  }
  {
    Block block(f.chain);
    RequestContext ctx;
    f.begin(ctx, block);
    ctx.status = 401;
    ctx.fail(Error{ErrorKind::InvalidApiKey, "no"});
    ctx.end = ctx.start;
    f.chain.complete(ctx);
  }
  f.records.flush();
  auto records = f.drain(f.record_queue);
  ASSERT_EQ(records.size(), 1u) << "the 401 has none";
  EXPECT_EQ(records[0]["total_tokens"].as_int64(), 0);
  EXPECT_EQ(records[0]["usage_source"].as_string(), "none");
  EXPECT_EQ(records[0]["end_reason"].as_string(), "upstream_error");
}

TEST(AccessLogFilter, SampleSuccessKeepsAnExactShareAndEveryError) {
  auto file = LogFile::open("/dev/null", 1 << 20, nullptr);
  AccessLogSink sink(file);
  AccessLogConfig cfg;
  cfg.sample_success = 0.25;
  FilterChain chain;
  chain.add(makeAccessLogFilter(sink, cfg));
  auto config = std::make_shared<Config>();
  auto run = [&](int status) {
    RequestContext ctx;
    ctx.config = config;
    ctx.status = status;
    chain.complete(ctx);
  };
  for (int i = 0; i < 8; ++i) run(200);
  for (int i = 0; i < 3; ++i) run(500);
  JsonBuf lines;
  EXPECT_EQ(formatAccessLog(sink.entries().view(), lines), 2u + 3u);
  const std::string_view written = lines.view();
  EXPECT_EQ(std::count(written.begin(), written.end(), '\n'), 2 + 3);
  EXPECT_NE(written.find("\"level\":\"error\""), std::string::npos);
}


TEST(AccessLogFilter, EntriesPastThePendingBoundAreDroppedAndCountedAsLines) {
  auto file = LogFile::open("/dev/null", 1, nullptr);  // nothing fits: the writer is "behind"
  AccessLogSink sink(file);
  FilterChain chain;
  chain.add(makeAccessLogFilter(sink, AccessLogConfig{}));
  auto config = std::make_shared<Config>();
  for (int i = 0; i < 3; ++i) {
    RequestContext ctx;
    ctx.config = config;
    ctx.status = 200;
    chain.complete(ctx);
  }
  sink.flush();
  EXPECT_EQ(file->droppedLines(), 3u);
  EXPECT_TRUE(sink.entries().empty());  // its memory kept for the next entries
}

// The access log's line and the usage record of a request that sets every field, and of
// one that sets almost none, byte for byte as the worker wrote them when it formatted
// them itself (before issue 41; these expectations were taken from that code): only the
// times and the record's id, which vary, are masked.
struct GoldenRequest {
  GoldenRequest() {
    config->region.name = "eu-1";
    config->usage.gateway_id = "gw-1";
    model.name = "gpt-x";
    model.pricing.set = true;
    model.pricing.input = 2.5;
    model.pricing.output = 10;
    model.pricing.cached_input = 1.25;
    model.pricing.per_image = 0.04;
    asked.name = "gpt-big";
    provider.name = "openai-1";
    deployment.id = "d1";
    deployment.version = "canary";
    deployment.address = "10.0.0.1:443";
    tenant.name = "team";
    key.name = "k1";
    key.prefix = "sk-ab";
  }
  void rich(RequestContext& ctx) {
    ctx.config = config;
    ctx.request_id = std::string("req-\"q\"\x01", 8);
    for (std::uint8_t i = 0; i < 16; ++i) ctx.trace.trace_id[i] = static_cast<std::uint8_t>(i + 1);
    for (std::uint8_t i = 0; i < 8; ++i) ctx.trace.span_id[i] = static_cast<std::uint8_t>(0xa0 + i);
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.method = "POST";
    ctx.path = "/v1/chat/completions";
    ctx.facts.model = "gpt-big";
    ctx.model = &model;
    ctx.requested_model = &asked;
    ctx.provider = &provider;
    ctx.deployment = &deployment;
    ctx.route_reason = "percent";
    ctx.route_name = "r-main";
    ctx.fallback = "model";
    ctx.principal.tenant = &tenant;
    ctx.principal.key = &key;
    auto caller = std::make_shared<CallerIdentity>();
    caller->issuer = "idp";
    caller->subject = "alice";
    ctx.principal.caller = caller;
    ctx.record_fields[static_cast<std::size_t>(RecordField::Prompt)] = "greet@2";
    ctx.record_fields[static_cast<std::size_t>(RecordField::CacheTokensSaved)] = "17";
    ctx.record_fields[static_cast<std::size_t>(RecordField::QualitySimilarity)] = "0.9";
    ctx.record_fields[static_cast<std::size_t>(RecordField::McpArguments)] = R"({"a":"b\n"})";
    ctx.status = 504;
    ctx.streaming = true;
    ctx.bytes_in = 1234;
    ctx.bytes_out = 5678;
    ctx.chunks_out = 9;
    ctx.attempts = 3;
    ctx.start = std::chrono::steady_clock::now();
    ctx.first_byte = ctx.start + std::chrono::nanoseconds(345'678);
    ctx.end = ctx.start + std::chrono::nanoseconds(1'234'567);
    ctx.usage.prompt_tokens = 100;
    ctx.usage.completion_tokens = 20;
    ctx.usage.total_tokens = 120;
    ctx.usage.cached_tokens = 10;
    ctx.usage.images = 2;
    ctx.usage.audio_seconds = 1.5;
    ctx.usage.characters = 30;
    ctx.fail(Error{ErrorKind::UpstreamTimeout, "slow"});
    ctx.error->timeout_kind = "first_byte";
  }
  void bare(RequestContext& ctx) {
    ctx.config = config;
    ctx.request_id = "req-2";
    ctx.endpoint = Endpoint::Messages;
    ctx.method = "POST";
    ctx.path = "/v1/messages";
    ctx.facts.model = "claude-x";
    ctx.status = 200;
    ctx.attempts = 1;
    ctx.start = std::chrono::steady_clock::now();
    ctx.end = ctx.start + std::chrono::microseconds(2'000);
  }
  // `s` with the value of each of `keys` (a JSON string) replaced by "~".
  static std::string masked(std::string s, std::initializer_list<std::string_view> keys) {
    for (std::string_view k : keys) {
      const std::string open = "\"" + std::string(k) + "\":\"";
      const std::size_t at = s.find(open);
      if (at == std::string::npos) continue;
      const std::size_t from = at + open.size();
      s.replace(from, s.find('"', from) - from, "~");
    }
    return s;
  }
  std::shared_ptr<Config> config = std::make_shared<Config>();
  ModelConfig model, asked;
  ProviderConfig provider;
  DeploymentConfig deployment;
  TenantConfig tenant;
  ApiKeyConfig key;
};

TEST(AccessLogFilter, WritesTheLineByteForByteAsBefore) {
  char path[] = "/tmp/tahua-golden-log-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  GoldenRequest g;
  {
    auto file = LogFile::open(path, 1 << 20, nullptr);
    AccessLogSink sink(file);
    FilterChain chain;
    chain.add(makeAccessLogFilter(sink, AccessLogConfig{}));
    RequestContext rich, bare;
    g.rich(rich);
    chain.complete(rich);
    g.bare(bare);
    chain.complete(bare);
  }  // the sink hands its lines over, the file writes them and stops
  std::ifstream in(path);
  std::string rich_line, bare_line;
  std::getline(in, rich_line);
  std::getline(in, bare_line);
  ::unlink(path);
  EXPECT_EQ(GoldenRequest::masked(rich_line, {"ts"}),
            R"({"ts":"~","level":"error","request_id":"req-\"q\"\u0001","trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"a0a1a2a3a4a5a6a7","method":"POST","path":"/v1/chat/completions","model":"gpt-x","provider":"openai-1","deployment":"d1","version":"canary","upstream_address":"10.0.0.1:443","route":"percent","route_name":"r-main","tenant":"team","key":"k1","key_prefix":"sk-ab","fallback":"model","requested_model":"gpt-big","prompt":"greet@2","cache_tokens_saved":17,"quality_similarity":0.9,"mcp_arguments":"{\"a\":\"b\\n\"}","status":504,"stream":true,"bytes_in":1234,"bytes_out":5678,"duration_ms":1.234,"ttft_ms":0.345,"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"cached_tokens":10,"images":2,"audio_seconds":1.5,"characters":30,"cost_usd":0.0804375,"api":"openai","error":"upstream_timeout","timeout":"first_byte","end_reason":"timeout","chunks":9,"attempts":3})");
  EXPECT_EQ(GoldenRequest::masked(bare_line, {"ts"}),
            R"({"ts":"~","level":"info","request_id":"req-2","method":"POST","path":"/v1/messages","model":"claude-x","provider":null,"deployment":null,"version":null,"status":200,"stream":false,"bytes_in":0,"bytes_out":0,"duration_ms":2,"ttft_ms":null,"prompt_tokens":null,"completion_tokens":null,"total_tokens":null,"cached_tokens":null,"cost_usd":null,"api":"anthropic","error":null,"end_reason":"done"})");
}

TEST(UsageFilter, WritesTheRecordByteForByteAsBefore) {
  GoldenRequest g;
  ExportQueue queue(100);
  ExportBuffer records(&queue, 0);
  FilterChain chain;
  chain.add(makeUsageFilter(*g.config, records, nullptr));
  for (int i = 0; i < 2; ++i) {
    Block block(chain);
    RequestContext ctx;
    if (i == 0) g.rich(ctx);
    else g.bare(ctx);
    chain.begin(ctx, block.get());
    chain.complete(ctx);
  }
  records.flush();
  std::string lines;
  for (auto& b : queue.take(std::chrono::milliseconds(0))) {
    JsonBuf out;
    EXPECT_EQ(formatUsageRecords(b.data.view(), out), 2u);
    lines.append(out.view());
  }
  const std::size_t nl = lines.find('\n');
  ASSERT_NE(nl, std::string::npos);
  EXPECT_EQ(GoldenRequest::masked(lines.substr(0, nl), {"record_id", "ts", "end_ts"}),
            R"({"record_id":"~","request_id":"req-\"q\"\u0001","ts":"~","end_ts":"~","gateway":"gw-1","region":"eu-1","tenant":"team","key":"k1","key_prefix":"sk-ab","issuer":"idp","subject":"alice","api":"openai","method":"POST","path":"/v1/chat/completions","requested_model":"gpt-big","model":"gpt-x","provider":"openai-1","deployment":"d1","version":"canary","route_name":"r-main","stream":true,"status":504,"end_reason":"timeout","error":"upstream_timeout","replayed":false,"prompt_tokens":100,"completion_tokens":20,"cached_tokens":10,"total_tokens":120,"images":2,"audio_seconds":1.5,"characters":30,"usage_source":"upstream","cost_usd":0.0804375,"duration_ms":1.234,"ttft_ms":0.345,"bytes_out":5678,"attempts":3,"fallback":"model","prompt":"greet@2","cache":null,"cache_tokens_saved":17,"guardrails":null,"guardrail_signals":null,"guardrails_unchecked":null,"quality":null,"quality_similarity":0.9,"mcp_method":null,"mcp_tool":null,"mcp_outcome":null,"mcp_arguments":"{\"a\":\"b\\n\"}","trace_id":"0102030405060708090a0b0c0d0e0f10"})");
  EXPECT_EQ(GoldenRequest::masked(lines.substr(nl + 1), {"record_id", "ts", "end_ts"}),
            R"({"record_id":"~","request_id":"req-2","ts":"~","end_ts":"~","gateway":"gw-1","region":"eu-1","tenant":null,"key":null,"key_prefix":null,"issuer":null,"subject":null,"api":"anthropic","method":"POST","path":"/v1/messages","requested_model":"claude-x","model":null,"provider":null,"deployment":null,"version":null,"route_name":null,"stream":false,"status":200,"end_reason":"done","error":null,"replayed":false,"prompt_tokens":0,"completion_tokens":0,"cached_tokens":0,"total_tokens":0,"images":null,"audio_seconds":null,"characters":null,"usage_source":"none","cost_usd":null,"duration_ms":2,"ttft_ms":null,"bytes_out":0,"attempts":1,"fallback":null,"prompt":null,"cache":null,"cache_tokens_saved":null,"guardrails":null,"guardrail_signals":null,"guardrails_unchecked":null,"quality":null,"quality_similarity":null,"mcp_method":null,"mcp_tool":null,"mcp_outcome":null,"mcp_arguments":null,"trace_id":null})" "\n");
}

}  // namespace telemetry_test
}  // namespace tahua
