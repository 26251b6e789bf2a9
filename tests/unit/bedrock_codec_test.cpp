#include "translate/bedrock_codec.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "aws/event_stream.h"

namespace tahua {
namespace bedrock_codec_test {  // named, not anonymous: eight test files compile as one unit

namespace json = boost::json;

// Fixtures live next to the tests; ctest runs from the source dir, a hand-built binary
// may run from anywhere, so try the path relative to this file first.
std::string readFixture(const std::string& name) {
  const std::filesystem::path rel = std::filesystem::path("tests/fixtures/bedrock") / name;
  const std::filesystem::path by_file = std::filesystem::path(__FILE__).parent_path() / "../fixtures/bedrock" / name;
  for (const auto& p : {by_file, rel}) {
    std::ifstream in(p, std::ios::binary);
    if (!in) continue;
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  ADD_FAILURE() << "fixture not found: " << name;
  return "{}";
}

json::value fixtureJson(const std::string& name) { return json::parse(readFixture(name)); }

EncodeOptions options(bool stream = false) {
  EncodeOptions o;
  o.upstream_model = "anthropic.claude-3-5-sonnet-20240620-v1:0";
  o.stream = stream;
  o.default_max_tokens = 4096;
  return o;
}

std::variant<EncodedRequest, Error> encode(const json::value& chat, bool stream = false) {
  return makeBedrockCodec()->encodeRequest(chat.as_object(), options(stream));
}

EncodedRequest encodeOk(const json::value& chat, bool stream = false) {
  auto r = encode(chat, stream);
  if (auto* e = std::get_if<Error>(&r)) {
    ADD_FAILURE() << e->message;
    return {};
  }
  return std::get<EncodedRequest>(std::move(r));
}

Error encodeErr(std::string_view chat_json) {
  auto r = encode(json::parse(chat_json));
  if (!std::holds_alternative<Error>(r)) {
    ADD_FAILURE() << "expected an error for " << chat_json << ", got " << std::get<EncodedRequest>(r).body;
    return {};
  }
  return std::get<Error>(r);
}

// ---------------------------------------------------------------- request

TEST(BedrockCodec, EncodesTheGoldenRequest) {
  const auto req = encodeOk(fixtureJson("chat_request.json"));
  EXPECT_EQ(req.path, "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse");
  EXPECT_EQ(req.content_type, "application/json");
  EXPECT_EQ(req.accept, "application/json");
  const json::value got = json::parse(req.body);
  const json::value want = fixtureJson("converse_request.json");
  EXPECT_EQ(got, want) << "got:  " << json::serialize(got) << "\nwant: " << json::serialize(want);
}

TEST(BedrockCodec, StreamingPathAndAccept) {
  const auto req = encodeOk(json::parse(R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})"), true);
  EXPECT_EQ(req.path, "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream");
  EXPECT_EQ(req.accept, "application/vnd.amazon.eventstream");
  const json::value body = json::parse(req.body);
  EXPECT_FALSE(body.as_object().contains("stream"));
}

TEST(BedrockCodec, ModelArnIsEncodedAsOneSegment) {
  EncodeOptions o = options();
  o.upstream_model = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-haiku";
  auto r = makeBedrockCodec()->encodeRequest(json::parse(R"({"messages":[{"role":"user","content":"hi"}]})").as_object(), o);
  ASSERT_TRUE(std::holds_alternative<EncodedRequest>(r));
  EXPECT_EQ(std::get<EncodedRequest>(r).path,
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-haiku/converse");
}

TEST(BedrockCodec, MinimalRequestGetsDefaultMaxTokensAndNoOptionalSections) {
  const auto req = encodeOk(json::parse(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"));
  EXPECT_EQ(json::parse(req.body), json::parse(R"({"messages":[{"role":"user","content":[{"text":"hi"}]}],
                                                   "inferenceConfig":{"maxTokens":4096}})"));
}

TEST(BedrockCodec, MaxTokensAndStopString) {
  const auto req = encodeOk(json::parse(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":100,"stop":"END","temperature":1})"));
  EXPECT_EQ(json::parse(req.body).at("inferenceConfig"),
            json::parse(R"({"maxTokens":100,"temperature":1,"stopSequences":["END"]})"));
}

TEST(BedrockCodec, ToolChoices) {
  const std::string base =
      R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":)";
  auto config = [&](std::string_view choice) {
    const auto req = encodeOk(json::parse(base + std::string(choice) + "}"));
    const json::value parsed = json::parse(req.body);
    const auto& body = parsed.as_object();
    return body.contains("toolConfig") ? body.at("toolConfig") : json::value();
  };
  const json::value tools = json::parse(R"([{"toolSpec":{"name":"f","inputSchema":{"json":{"type":"object"}}}}])");
  EXPECT_EQ(config(R"("auto")"), (json::object{{"tools", tools}, {"toolChoice", json::object{{"auto", json::object{}}}}}));
  EXPECT_EQ(config(R"("required")"), (json::object{{"tools", tools}, {"toolChoice", json::object{{"any", json::object{}}}}}));
  EXPECT_EQ(config(R"({"type":"function","function":{"name":"f"}})"),
            (json::object{{"tools", tools}, {"toolChoice", json::object{{"tool", json::object{{"name", "f"}}}}}}));
  EXPECT_EQ(config("null"), (json::object{{"tools", tools}}));
  // "none": no tools offered...
  EXPECT_TRUE(config(R"("none")").is_null());
  // ...unless the history has tool blocks, which Bedrock only accepts with a toolConfig.
  const auto req = encodeOk(json::parse(
      R"({"messages":[{"role":"user","content":"hi"},
                      {"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}}]},
                      {"role":"tool","tool_call_id":"t1","content":"ok"}],
          "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"none"})"));
  EXPECT_EQ(json::parse(req.body).at("toolConfig"), (json::object{{"tools", tools}}));
}

TEST(BedrockCodec, UnsupportedAndInvalidParametersAreNamed) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"messages":[{"role":"user","content":"hi"}],"n":2})", "'n'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true})", "'logprobs'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":2})", "'top_logprobs'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{}}})", "'response_format'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"frequency_penalty":0.5})", "'frequency_penalty'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"logit_bias":{"50256":-100}})", "'logit_bias'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"functions":[]})", "'functions'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":0})", "'max_tokens'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":"10"})", "'max_completion_tokens'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"temperature":"hot"})", "'temperature'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"top_p":2})", "'top_p'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"stop":[1]})", "'stop'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"required"})", "'tool_choice'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"sometimes","tools":[]})", "'tool_choice'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"code_interpreter"}]})", "'tools[0].type'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{}}]})", "'tools[0].function.name'"},
      {R"({"messages":"hi"})", "'messages'"},
      {R"({})", "'messages'"},
      {R"({"messages":[]})", "'messages'"},
      {R"({"messages":[{"role":"system","content":"only a system prompt"}]})", "'messages'"},
      {R"({"messages":[{"role":"user","content":"hi"},{"role":"wizard","content":"x"}]})", "'messages[1].role'"},
      {R"({"messages":[{"content":"x"}]})", "'messages[0].role'"},
      {R"({"messages":[{"role":"user","content":42}]})", "'messages[0].content'"},
      {R"({"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]})", "'messages[0].content[0].type'"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]})",
       "'messages[0].content[0].image_url.url'"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/bmp;base64,AAAA"}}]}]})",
       "'messages[0].content[0].image_url.url'"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,rawbytes"}}]}]})",
       "'messages[0].content[0].image_url.url'"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@@@"}}]}]})",
       "'messages[0].content[0].image_url.url'"},
      {R"({"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]})",
       "'messages[0].content[0].type'"},
      {R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"[1]"}}]}]})",
       "'messages[1].tool_calls[0].function.arguments'"},
      {R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f"}}]}]})",
       "'messages[1].tool_calls[0].id'"},
      {R"({"messages":[{"role":"user","content":"hi"},{"role":"tool","content":"x"}]})", "'messages[1].tool_call_id'"},
  };
  for (const auto& c : cases) {
    const Error e = encodeErr(c.body);
    EXPECT_EQ(e.kind, ErrorKind::InvalidRequest) << c.body;
    EXPECT_EQ(e.httpStatus(), 400);
    EXPECT_NE(e.message.find(c.param), std::string::npos) << c.body << " -> " << e.message;
  }
}

TEST(BedrockCodec, ImageFormatsAndHttpUrlMessage) {
  for (const auto& [mime, format] : std::map<std::string, std::string>{
           {"image/png", "png"}, {"image/jpeg", "jpeg"}, {"image/JPG", "jpeg"}, {"image/gif", "gif"}, {"image/webp", "webp"}}) {
    const auto req = encodeOk(json::parse(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:)" +
                                          mime + R"(;base64,R0lGODlh"}}]}]})"));
    EXPECT_EQ(json::parse(req.body).at("messages").at(0).at("content").at(0),
              json::parse(R"({"image":{"format":")" + format + R"(","source":{"bytes":"R0lGODlh"}}})"));
  }
  const Error e = encodeErr(
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]})");
  EXPECT_NE(e.message.find("data: URL"), std::string::npos) << e.message;
}

TEST(BedrockCodec, EmptyTextIsDroppedAndRolesMerge) {
  const auto req = encodeOk(json::parse(R"({"messages":[
      {"role":"user","content":"a"},{"role":"user","content":""},{"role":"user","content":"b"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},
      {"role":"tool","tool_call_id":"t","content":""}]})"));
  EXPECT_EQ(json::parse(req.body).at("messages"), json::parse(R"([
      {"role":"user","content":[{"text":"a"},{"text":"b"}]},
      {"role":"assistant","content":[{"toolUse":{"toolUseId":"t","name":"f","input":{"x":1}}}]},
      {"role":"user","content":[{"toolResult":{"toolUseId":"t","content":[]}}]}])"));
}

// ---------------------------------------------------------------- response

ChatResult decodeOk(std::string_view body) {
  auto r = makeBedrockCodec()->decodeResponse(body);
  if (auto* e = std::get_if<Error>(&r)) {
    ADD_FAILURE() << e->message;
    return {};
  }
  return std::get<ChatResult>(std::move(r));
}

TEST(BedrockCodec, DecodesTextResponse) {
  const auto r = decodeOk(readFixture("converse_response_text.json"));
  EXPECT_EQ(r.content, "Paris is sunny, 18 C.");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.usage.prompt_tokens, 125);
  EXPECT_EQ(r.usage.completion_tokens, 9);
  EXPECT_EQ(r.usage.cached_tokens, -1);
}

TEST(BedrockCodec, DecodesToolUseResponse) {
  const auto r = decodeOk(readFixture("converse_response_tool_use.json"));
  EXPECT_EQ(r.content, "I'll look that up.");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].id, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q");
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(r.tool_calls[0].arguments), json::parse(R"({"city":"Paris","unit":"celsius"})"));
  EXPECT_EQ(r.tool_calls[1].name, "get_time");
  EXPECT_EQ(json::parse(r.tool_calls[1].arguments), json::parse("{}"));
  EXPECT_EQ(r.finish_reason, "tool_calls");
  EXPECT_EQ(r.usage.prompt_tokens, 300 + 1024 + 176);  // cache reads and writes included
  EXPECT_EQ(r.usage.cached_tokens, 1024);
  EXPECT_EQ(r.usage.completion_tokens, 80);
}

TEST(BedrockCodec, StopReasons) {
  const std::pair<const char*, const char*> cases[] = {{"end_turn", "stop"},
                                                       {"stop_sequence", "stop"},
                                                       {"max_tokens", "length"},
                                                       {"tool_use", "tool_calls"},
                                                       {"content_filtered", "content_filter"},
                                                       {"guardrail_intervened", "content_filter"}};
  for (const auto& [bedrock, openai] : cases) {
    const auto r = decodeOk(std::string(R"({"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"stopReason":")") +
                            bedrock + "\"}");
    EXPECT_EQ(r.finish_reason, openai) << bedrock;
  }
}

TEST(BedrockCodec, MalformedResponsesAreBadResponses) {
  for (const char* body : {"", "[]", "not json", R"({"output":{}})", R"({"output":{"message":{"content":"x"}}})",
                           R"({"output":{"message":{"content":[1]}}})", R"({"output":{"message":{"content":[{"text":1}]}}})",
                           R"({"output":{"message":{"content":[{"toolUse":{"name":"f"}}]}}})"}) {
    auto r = makeBedrockCodec()->decodeResponse(body);
    ASSERT_TRUE(std::holds_alternative<Error>(r)) << body;
    EXPECT_EQ(std::get<Error>(r).kind, ErrorKind::UpstreamBadResponse) << body;
  }
}

// ---------------------------------------------------------------- errors

TEST(BedrockCodec, DecodesErrors) {
  auto codec = makeBedrockCodec();
  auto e = codec->decodeError(429, R"({"message":"Too many requests, please wait before trying again."})");
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(e.type, "ThrottlingException");
  EXPECT_EQ(e.message, "Too many requests, please wait before trying again.");
  e = codec->decodeError(400, R"({"Message":"The provided model identifier is invalid."})");
  EXPECT_EQ(e.type, "ValidationException");
  EXPECT_EQ(e.message, "The provided model identifier is invalid.");
  e = codec->decodeError(403, R"({"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."})");
  EXPECT_EQ(e.status, 403);
  EXPECT_EQ(e.type, "UnrecognizedClientException");
  e = codec->decodeError(404, R"({"message":"x","code":"ResourceNotFoundException:http://internal.amazon.com/coral/"})");
  EXPECT_EQ(e.type, "ResourceNotFoundException");
  e = codec->decodeError(503, "<html>gateway</html>");
  EXPECT_EQ(e.status, 503);
  EXPECT_EQ(e.type, "ServiceUnavailableException");
  EXPECT_EQ(e.message, "Bedrock returned HTTP 503.");
  e = codec->decodeError(500, std::string(R"({"message":")") + std::string(5000, 'a') + "\"}");
  EXPECT_LE(e.message.size(), 1100u);
  // The clip falls between characters: the client gets the message inside JSON, which
  // must stay UTF-8 (a 2-byte "\u00e9" straddling the 1024-byte limit is dropped whole).
  e = codec->decodeError(500, std::string(R"({"message":")") + std::string(1023, 'a') + "\u00e9tail\"}");
  EXPECT_EQ(e.message, std::string(1023, 'a') + "...");
}

// ---------------------------------------------------------------- stream

std::string encodeStreamFixture(const json::value& events) {
  std::string bytes;
  for (const auto& ev : events.as_array()) {
    std::vector<EventStreamHeader> headers;
    for (const auto& [k, v] : ev.at("headers").as_object())
      headers.push_back(EventStreamHeader::string(std::string(k), std::string(v.as_string())));
    auto m = encodeEventStreamMessage(headers, json::serialize(ev.at("payload")));
    if (auto* e = std::get_if<Error>(&m)) ADD_FAILURE() << e->message;
    else bytes += std::get<std::string>(m);
  }
  return bytes;
}

std::string eventBytes(std::string_view event_type, std::string_view payload, std::string_view message_type = "event") {
  std::vector<EventStreamHeader> h{EventStreamHeader::string(":event-type", std::string(event_type)),
                                   EventStreamHeader::string(":content-type", "application/json"),
                                   EventStreamHeader::string(":message-type", std::string(message_type))};
  return std::get<std::string>(encodeEventStreamMessage(h, payload));
}

struct Collect : ChunkSink {
  std::vector<std::string> chunks;  // every chunk, rendered
  std::string content;
  std::map<int, ToolCall> calls;
  std::string finish_reason;
  std::optional<Usage> usage;
  int starts = 0;
  void onChunk(const ChatChunk& c) override {
    std::string s = (c.start ? "S|" : "|") + c.content + "|";
    for (const auto& t : c.tool_calls) {
      s += std::to_string(t.index) + ":" + t.id + ":" + t.name + ":" + t.arguments + ";";
      auto& call = calls[t.index];
      if (!t.id.empty()) call.id = t.id;
      if (!t.name.empty()) call.name = t.name;
      call.arguments += t.arguments;
    }
    s += "|" + c.finish_reason;
    if (c.usage) s += "|u" + std::to_string(c.usage->prompt_tokens) + "/" + std::to_string(c.usage->completion_tokens) + "/" +
                      std::to_string(c.usage->cached_tokens);
    chunks.push_back(s);
    content += c.content;
    if (!c.finish_reason.empty()) finish_reason = c.finish_reason;
    if (c.usage) usage = c.usage;
    if (c.start) ++starts;
  }
};

struct StreamRun {
  Collect sink;
  std::optional<Error> error;
};

StreamRun runStream(const std::vector<std::string_view>& pieces) {
  StreamRun run;
  auto dec = makeBedrockCodec()->streamDecoder();
  for (auto p : pieces) {
    run.error = dec->feed(p, run.sink);
    if (run.error) return run;
  }
  run.error = dec->finish(run.sink);
  return run;
}

TEST(BedrockCodec, StreamFixtureDecodes) {
  const std::string bytes = encodeStreamFixture(fixtureJson("converse_stream.json"));
  const auto run = runStream({bytes});
  ASSERT_FALSE(run.error) << run.error->message;
  const auto& s = run.sink;
  EXPECT_EQ(s.starts, 1);
  EXPECT_EQ(s.content, "Let me check. \xC3\xA9t\xC3\xA9 \xF0\x9F\x8C\x9E");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls.at(0).id, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q");
  EXPECT_EQ(s.calls.at(0).name, "get_weather");
  EXPECT_EQ(json::parse(s.calls.at(0).arguments), json::parse(R"({"city":"Paris","unit":"celsius"})"));
  EXPECT_EQ(s.calls.at(1).id, "tooluse_Qb2nPq0XTu2Ue3BpWUmcsA");
  EXPECT_EQ(s.calls.at(1).name, "get_time");
  EXPECT_EQ(s.calls.at(1).arguments, "{}");
  EXPECT_EQ(s.finish_reason, "tool_calls");
  ASSERT_TRUE(s.usage.has_value());
  EXPECT_EQ(s.usage->prompt_tokens, 412 + 1024);
  EXPECT_EQ(s.usage->completion_tokens, 57);
  EXPECT_EQ(s.usage->cached_tokens, 1024);
  EXPECT_EQ(s.chunks.front(), "S|||");
}

TEST(BedrockCodec, StreamAnySplitGivesIdenticalChunks) {
  const std::string bytes = encodeStreamFixture(fixtureJson("converse_stream.json"));
  const auto whole = runStream({bytes});
  ASSERT_FALSE(whole.error);
  const std::string_view v(bytes);
  for (std::size_t cut = 0; cut <= bytes.size(); ++cut) {
    const auto run = runStream({v.substr(0, cut), v.substr(cut)});
    ASSERT_FALSE(run.error) << "split at " << cut << ": " << run.error->message;
    ASSERT_EQ(run.sink.chunks, whole.sink.chunks) << "split at " << cut;
  }
  std::vector<std::string_view> bytewise;
  for (std::size_t i = 0; i < bytes.size(); ++i) bytewise.push_back(v.substr(i, 1));
  const auto run = runStream(bytewise);
  ASSERT_FALSE(run.error);
  EXPECT_EQ(run.sink.chunks, whole.sink.chunks);
  EXPECT_EQ(run.sink.content, whole.sink.content);
  EXPECT_EQ(run.sink.finish_reason, "tool_calls");
}

TEST(BedrockCodec, StreamTruncationIsAnError) {
  const std::string bytes = encodeStreamFixture(fixtureJson("converse_stream.json"));
  // Cut inside an event, and cut cleanly before messageStop / before metadata.
  const auto mid = runStream({std::string_view(bytes).substr(0, bytes.size() - 3)});
  ASSERT_TRUE(mid.error);
  EXPECT_EQ(mid.error->kind, ErrorKind::UpstreamTruncated);
  const std::string no_stop = eventBytes("messageStart", R"({"role":"assistant"})") +
                              eventBytes("contentBlockDelta", R"({"contentBlockIndex":0,"delta":{"text":"Hi"}})");
  const auto r1 = runStream({no_stop});
  ASSERT_TRUE(r1.error);
  EXPECT_EQ(r1.error->kind, ErrorKind::UpstreamTruncated);
  EXPECT_EQ(r1.sink.content, "Hi");
  const auto r2 = runStream({no_stop + eventBytes("messageStop", R"({"stopReason":"end_turn"})")});
  ASSERT_TRUE(r2.error);
  EXPECT_NE(r2.error->message.find("metadata"), std::string::npos);
  const auto r3 = runStream({""});
  ASSERT_TRUE(r3.error);
}

TEST(BedrockCodec, StreamExceptionEventIsAnError) {
  std::vector<EventStreamHeader> h{EventStreamHeader::string(":exception-type", "throttlingException"),
                                   EventStreamHeader::string(":content-type", "application/json"),
                                   EventStreamHeader::string(":message-type", "exception")};
  const std::string bytes = eventBytes("messageStart", R"({"role":"assistant"})") +
                            eventBytes("contentBlockDelta", R"({"contentBlockIndex":0,"delta":{"text":"Hi"}})") +
                            std::get<std::string>(encodeEventStreamMessage(h, R"({"message":"Too many tokens, please wait."})")) +
                            eventBytes("contentBlockDelta", R"({"contentBlockIndex":0,"delta":{"text":"never"}})");
  auto dec = makeBedrockCodec()->streamDecoder();
  Collect sink;
  auto err = dec->feed(bytes, sink);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, ErrorKind::UpstreamInterrupted);
  EXPECT_NE(err->message.find("throttlingException"), std::string::npos);
  EXPECT_NE(err->message.find("Too many tokens, please wait."), std::string::npos);
  EXPECT_EQ(sink.content, "Hi");
  // Stays failed.
  ASSERT_TRUE(dec->feed(eventBytes("messageStop", R"({"stopReason":"end_turn"})"), sink));
  ASSERT_TRUE(dec->finish(sink));

  std::vector<EventStreamHeader> eh{EventStreamHeader::string(":error-code", "InternalFailure"),
                                    EventStreamHeader::string(":error-message", "An internal error occurred."),
                                    EventStreamHeader::string(":message-type", "error")};
  auto dec2 = makeBedrockCodec()->streamDecoder();
  err = dec2->feed(std::get<std::string>(encodeEventStreamMessage(eh, "")), sink);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("InternalFailure"), std::string::npos);
  EXPECT_NE(err->message.find("An internal error occurred."), std::string::npos);
}

// Header values are raw bytes; quoted in an error (sent to the client as JSON) they must
// be UTF-8: bytes that are not become U+FFFD, valid multi-byte characters stay.
TEST(BedrockCodec, StreamErrorHeadersAreQuotedAsUtf8) {
  std::vector<EventStreamHeader> h{EventStreamHeader::string(":exception-type", "throttling\xFF\xC3" "Exception\xC3\xA9"),
                                   EventStreamHeader::string(":message-type", "exception")};
  auto dec = makeBedrockCodec()->streamDecoder();
  Collect sink;
  auto err = dec->feed(std::get<std::string>(encodeEventStreamMessage(h, "")), sink);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("(throttling\xEF\xBF\xBD\xEF\xBF\xBD" "Exception\xC3\xA9)"), std::string::npos) << err->message;
}

TEST(BedrockCodec, StreamMalformedEventsAreBadResponses) {
  const std::string start = eventBytes("messageStart", R"({"role":"assistant"})");
  for (const std::string& bad : {eventBytes("contentBlockDelta", "not json"),
                                 eventBytes("contentBlockDelta", R"({"contentBlockIndex":3,"delta":{"toolUse":{"input":"{"}}})"),
                                 eventBytes("contentBlockDelta", R"({"contentBlockIndex":0,"delta":{"text":5}})"),
                                 eventBytes("contentBlockStart", R"({"contentBlockIndex":-1,"start":{"toolUse":{"toolUseId":"a","name":"b"}}})"),
                                 eventBytes("contentBlockStart", R"({"contentBlockIndex":1,"start":{"toolUse":{"name":"b"}}})"),
                                 std::string("\x00\x00\x00\x10", 4) + "garbage!garbage!"}) {
    auto dec = makeBedrockCodec()->streamDecoder();
    Collect sink;
    auto err = dec->feed(start + bad, sink);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->kind, ErrorKind::UpstreamBadResponse) << err->message;
  }
  // A block index started twice.
  const std::string twice = eventBytes("contentBlockStart", R"({"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"a","name":"b"}}})");
  auto dec = makeBedrockCodec()->streamDecoder();
  Collect sink;
  ASSERT_TRUE(dec->feed(start + twice + twice, sink));
}

// Random corruptions of the fixture stream, fed in random pieces: an error or a clean
// decode, never a crash (run under ASan/UBSan in CI).
TEST(BedrockCodec, StreamFuzzNeverCrashes) {
  const std::string good = encodeStreamFixture(fixtureJson("converse_stream.json"));
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  int errors = 0;
  for (int round = 0; round < 300; ++round) {
    std::string s = good;
    const int flips = 1 + static_cast<int>(next() % 3);
    for (int i = 0; i < flips; ++i) s[next() % s.size()] = static_cast<char>(next());
    auto dec = makeBedrockCodec()->streamDecoder();
    Collect sink;
    std::optional<Error> err;
    for (std::size_t pos = 0; pos < s.size() && !err;) {
      const std::size_t n = 1 + next() % 61;
      err = dec->feed(std::string_view(s).substr(pos, n), sink);
      pos += n;
    }
    if (!err) err = dec->finish(sink);
    if (err) ++errors;
  }
  EXPECT_GT(errors, 250);  // CRCs catch nearly every corruption
}

TEST(BedrockCodec, StreamIgnoresUnknownEventsAndReasoning) {
  const std::string bytes =
      eventBytes("messageStart", R"({"role":"assistant"})") + eventBytes("somethingNew", "{}") +
      eventBytes("contentBlockDelta", R"({"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"hmm"}}})") +
      eventBytes("contentBlockDelta", R"({"contentBlockIndex":1,"delta":{"text":"ok"}})") +
      eventBytes("messageStop", R"({"stopReason":"max_tokens"})") +
      eventBytes("metadata", R"({"usage":{"inputTokens":3,"outputTokens":1,"totalTokens":4},"metrics":{"latencyMs":1}})");
  const auto run = runStream({bytes});
  ASSERT_FALSE(run.error) << run.error->message;
  EXPECT_EQ(run.sink.content, "ok");
  EXPECT_EQ(run.sink.finish_reason, "length");
  ASSERT_TRUE(run.sink.usage);
  EXPECT_EQ(run.sink.usage->prompt_tokens, 3);
  EXPECT_EQ(run.sink.usage->cached_tokens, -1);
  EXPECT_EQ(run.sink.starts, 1);
}

}  // namespace bedrock_codec_test
}  // namespace tahua
