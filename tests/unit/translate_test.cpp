// Golden tests of the OpenAI, Anthropic and Responses codecs and of the pass-through
// translator: request mapping both ways, responses, and streams decoded at every split.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <fstream>
#include <map>
#include <sstream>

#include "providers/translation.h"
#include "sse/sse_parser.h"
#include "tokens/token_estimator.h"
#include "translate/inbound.h"

namespace tahua {
namespace translate_test {  // named, not anonymous: eight test files compile as one unit
namespace bj = boost::json;

std::string readFixture(const std::string& name) {
  std::ifstream in("tests/fixtures/" + name, std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bj::object fixtureObject(const std::string& name) { return bj::parse(readFixture(name)).as_object(); }

// Everything a stream decoder produced, accumulated the way a client would.
struct Collected : ChunkSink {
  int starts = 0;
  std::string text;
  std::map<int, ToolCall> calls;
  std::string finish;
  Usage usage;
  void onChunk(const ChatChunk& c) override {
    if (c.start) ++starts;
    text += c.content;
    for (const auto& d : c.tool_calls) {
      ToolCall& call = calls[d.index];
      if (!d.id.empty()) call.id = d.id;
      if (!d.name.empty()) call.name = d.name;
      call.arguments += d.arguments;
    }
    if (!c.finish_reason.empty()) finish = c.finish_reason;
    if (c.usage) usage = *c.usage;
  }
  bool operator==(const Collected& o) const {
    if (starts != o.starts || text != o.text || finish != o.finish || calls.size() != o.calls.size()) return false;
    for (const auto& [i, c] : calls) {
      auto it = o.calls.find(i);
      if (it == o.calls.end() || it->second.id != c.id || it->second.name != c.name || it->second.arguments != c.arguments)
        return false;
    }
    return usage.prompt_tokens == o.usage.prompt_tokens && usage.completion_tokens == o.usage.completion_tokens && usage.cached_tokens == o.usage.cached_tokens;
  }
};

Collected decodeWhole(const VendorCodec& codec, std::string_view bytes) {
  auto d = codec.streamDecoder();
  Collected c;
  EXPECT_FALSE(d->feed(bytes, c));
  EXPECT_FALSE(d->finish(c));
  return c;
}

// The decoder's result must not depend on where the byte stream was cut.
void expectSplitInvariant(const VendorCodec& codec, std::string_view bytes) {
  const Collected whole = decodeWhole(codec, bytes);
  for (std::size_t cut = 0; cut <= bytes.size(); ++cut) {
    auto d = codec.streamDecoder();
    Collected c;
    ASSERT_FALSE(d->feed(bytes.substr(0, cut), c)) << "cut " << cut;
    ASSERT_FALSE(d->feed(bytes.substr(cut), c)) << "cut " << cut;
    ASSERT_FALSE(d->finish(c));
    ASSERT_TRUE(c == whole) << "split at byte " << cut;
  }
  auto d = codec.streamDecoder();
  Collected c;
  for (char ch : bytes) ASSERT_FALSE(d->feed(std::string_view(&ch, 1), c));
  ASSERT_FALSE(d->finish(c));
  EXPECT_TRUE(c == whole) << "byte by byte";
}

std::string crlf(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += '\r';
    out += c;
  }
  return out;
}

struct SseCollect : SseSink {
  std::vector<std::pair<std::string, bj::value>> events;  // (event name, data) ; "[DONE]" as a string
  void onEvent(const SseEvent& e) override {
    if (e.data == "[DONE]") events.emplace_back(std::string(e.event), bj::value("[DONE]"));
    else events.emplace_back(std::string(e.event), bj::parse(e.data));
  }
};

SseCollect parseSse(std::string_view text) {
  SseParser p;
  SseCollect c;
  EXPECT_TRUE(p.feed(text, c));
  return c;
}

// ---- Anthropic as the vendor ---------------------------------------------------------

TEST(AnthropicCodec, EncodesChatRequestLikeTheGoldenFixture) {
  auto codec = makeAnthropicCodec();
  EncodeOptions opts;
  opts.upstream_model = "claude-sonnet-4-5-20250929";
  opts.stream = true;
  auto encoded = codec->encodeRequest(fixtureObject("anthropic/chat_request.json"), opts);
  ASSERT_TRUE(std::holds_alternative<EncodedRequest>(encoded)) << std::get<Error>(encoded).message;
  const auto& req = std::get<EncodedRequest>(encoded);
  EXPECT_EQ(req.path, "/messages");
  EXPECT_EQ(req.accept, "text/event-stream");
  EXPECT_EQ(bj::parse(req.body), bj::parse(readFixture("anthropic/chat_request.expected.json"))) << req.body;
}

TEST(AnthropicCodec, AppliesTheDefaultMaxTokens) {
  auto codec = makeAnthropicCodec();
  EncodeOptions opts;
  opts.upstream_model = "claude";
  opts.default_max_tokens = 777;
  auto encoded = codec->encodeRequest(bj::parse(R"({"messages":[{"role":"user","content":"hi"}]})").as_object(), opts);
  ASSERT_TRUE(std::holds_alternative<EncodedRequest>(encoded));
  EXPECT_EQ(bj::parse(std::get<EncodedRequest>(encoded).body).at("max_tokens"), 777);
}

TEST(AnthropicCodec, RejectsWhatItCannotExpressNamingTheParameter) {
  auto codec = makeAnthropicCodec();
  EncodeOptions opts;
  for (auto [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"n":2,"messages":[{"role":"user","content":"hi"}]})", "'n'"},
           {R"({"logprobs":true,"messages":[{"role":"user","content":"hi"}]})", "'logprobs'"},
           {R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{oops"}}]}]})",
            "messages[0].tool_calls[0].function.arguments"},
           {R"({"messages":[]})", "'messages'"}}) {
    auto encoded = codec->encodeRequest(bj::parse(body).as_object(), opts);
    ASSERT_TRUE(std::holds_alternative<Error>(encoded)) << body;
    EXPECT_EQ(std::get<Error>(encoded).kind, ErrorKind::InvalidRequest);
    EXPECT_NE(std::get<Error>(encoded).message.find(param), std::string::npos) << std::get<Error>(encoded).message;
  }
}

TEST(AnthropicCodec, DecodesAResponseWithToolUse) {
  auto codec = makeAnthropicCodec();
  auto decoded = codec->decodeResponse(readFixture("anthropic/response_tool_use.json"));
  ASSERT_TRUE(std::holds_alternative<ChatResult>(decoded));
  const auto& r = std::get<ChatResult>(decoded);
  EXPECT_EQ(r.content, "I'll check the weather.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].id, "toolu_01A09q90qw90lq917835lq9");
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(bj::parse(r.tool_calls[0].arguments), bj::parse(R"({"location":"San Francisco, CA","unit":"celsius"})"));
  EXPECT_EQ(r.finish_reason, "tool_calls");
  EXPECT_EQ(r.usage.prompt_tokens, 3095);  // 2095 uncached + 1000 read from the cache
  EXPECT_EQ(r.usage.cached_tokens, 1000);
  EXPECT_EQ(r.usage.completion_tokens, 503);
}

TEST(AnthropicCodec, DecodesTheToolUseStreamAtEverySplit) {
  auto codec = makeAnthropicCodec();
  const std::string stream = readFixture("anthropic/stream_tool_use.sse");
  const Collected c = decodeWhole(*codec, stream);
  EXPECT_EQ(c.starts, 1);
  EXPECT_EQ(c.text, "Okay, let's check the weather für San Francisco 天气");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls.at(0).id, "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
  EXPECT_EQ(c.calls.at(0).name, "get_weather");
  EXPECT_EQ(c.calls.at(0).arguments, R"({"location": "San Francisco, CA", "unit": "fahrenheit"})");
  EXPECT_EQ(c.finish, "tool_calls");
  EXPECT_EQ(c.usage.prompt_tokens, 572);
  EXPECT_EQ(c.usage.cached_tokens, 100);
  EXPECT_EQ(c.usage.completion_tokens, 89);
  expectSplitInvariant(*codec, stream);
  EXPECT_TRUE(decodeWhole(*codec, crlf(stream)) == c);
}

TEST(AnthropicCodec, ATruncatedStreamOrAnErrorEventIsAnError) {
  auto codec = makeAnthropicCodec();
  std::string stream = readFixture("anthropic/stream_tool_use.sse");
  auto d = codec->streamDecoder();
  Collected c;
  EXPECT_FALSE(d->feed(stream.substr(0, stream.find("event: message_stop")), c));
  auto err = d->finish(c);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, ErrorKind::UpstreamTruncated);

  auto d2 = codec->streamDecoder();
  auto err2 = d2->feed("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", c);
  ASSERT_TRUE(err2);
  EXPECT_NE(err2->message.find("Overloaded"), std::string::npos);
}

TEST(AnthropicCodec, DecodesErrors) {
  auto codec = makeAnthropicCodec();
  auto info = codec->decodeError(529, R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})");
  EXPECT_EQ(info.status, 529);
  EXPECT_EQ(info.type, "overloaded_error");
  EXPECT_EQ(info.message, "Overloaded");
  EXPECT_FALSE(codec->decodeError(502, "<html>bad gateway</html>").message.empty());
}

// ---- Anthropic as the client's API ---------------------------------------------------

TEST(AnthropicInbound, BringsAMessagesRequestIntoChatForm) {
  auto chat = anthropicInbound().toChat(readFixture("anthropic/messages_request.json"));
  ASSERT_TRUE(std::holds_alternative<bj::object>(chat)) << std::get<Error>(chat).message;
  EXPECT_EQ(bj::value(std::get<bj::object>(chat)), bj::parse(readFixture("anthropic/messages_request.chat.expected.json")))
      << bj::serialize(std::get<bj::object>(chat));
}

TEST(AnthropicInbound, RefusesServerToolsForOtherModels) {
  auto chat = anthropicInbound().toChat(
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]})");
  ASSERT_TRUE(std::holds_alternative<Error>(chat));
  EXPECT_NE(std::get<Error>(chat).message.find("tools.0.type"), std::string::npos);
}

TEST(AnthropicInbound, EncodesAResultAsAMessage) {
  ChatResult r;
  r.content = "Hi";
  r.tool_calls.push_back(ToolCall{"call_1", "get_weather", R"({"location":"Paris"})"});
  r.finish_reason = "tool_calls";
  r.usage = Usage{.prompt_tokens = 20, .completion_tokens = 5, .cached_tokens = 8};
  auto msg = bj::parse(anthropicInbound().encodeResult(r, InboundOptions{"claude-alias", false})).as_object();
  EXPECT_EQ(msg.at("type"), "message");
  EXPECT_EQ(msg.at("model"), "claude-alias");
  EXPECT_EQ(msg.at("stop_reason"), "tool_use");
  EXPECT_EQ(msg.at("content"), bj::parse(R"([{"type":"text","text":"Hi"},
      {"type":"tool_use","id":"call_1","name":"get_weather","input":{"location":"Paris"}}])"));
  EXPECT_EQ(msg.at("usage"), bj::parse(R"({"input_tokens":12,"output_tokens":5,"cache_read_input_tokens":8})"));
}

// An OpenAI-format upstream stream re-encoded as Anthropic events: the event grammar
// the Anthropic SDK expects, with the tool arguments intact.
TEST(AnthropicInbound, EncodesAnOpenAIStreamAsMessageEvents) {
  auto codec = makeOpenAIChatCodec();
  auto encoder = anthropicInbound().streamEncoder(InboundOptions{"claude-alias", false});
  struct Sink : ChunkSink {
    ChatStreamEncoder* e;
    std::string out;
    void onChunk(const ChatChunk& c) override { e->onChunk(c, out); }
  } sink;
  sink.e = encoder.get();
  auto d = codec->streamDecoder();
  ASSERT_FALSE(d->feed(readFixture("openai/stream_tool_calls.sse"), sink));
  ASSERT_FALSE(d->finish(sink));
  encoder->finish(sink.out);
  auto events = parseSse(sink.out).events;
  std::vector<std::string> names;
  std::map<std::int64_t, std::string> json_by_block;
  std::string text;
  for (auto& [name, data] : events) {
    names.push_back(name);
    EXPECT_EQ(data.at("type"), name.c_str());  // every event's data names itself
    if (name == "content_block_delta") {
      auto& delta = data.at("delta").as_object();
      if (delta.at("type") == "text_delta") text += delta.at("text").as_string();
      else json_by_block[data.at("index").as_int64()] += delta.at("partial_json").as_string();
    }
  }
  const std::vector<std::string> expected = {"message_start", "content_block_start", "content_block_delta",
                                             "content_block_stop", "content_block_start", "content_block_delta",
                                             "content_block_delta", "content_block_stop", "content_block_start",
                                             "content_block_delta", "content_block_stop", "message_delta", "message_stop"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(text, "Let me look: ünïcödé 天气");
  EXPECT_EQ(json_by_block[1], R"({"location": "Paris"})");
  EXPECT_EQ(json_by_block[2], "{}");
  const auto& md = events[events.size() - 2].second;
  EXPECT_EQ(md.at("delta").at("stop_reason"), "tool_use");
  EXPECT_EQ(md.at("usage"), bj::parse(R"({"input_tokens":18,"output_tokens":17,"cache_read_input_tokens":64})"));
}

// Usage in a translated Anthropic stream: message_start announces the prompt's tokens
// (LangChain's ChatAnthropic reads them only there), message_delta the exact totals.
bj::object eventData(std::string_view sse, std::string_view name) {
  for (auto& [n, data] : parseSse(sse).events)
    if (n == name) return data.as_object();
  ADD_FAILURE() << "no " << name << " event in " << sse;
  return {};
}

TEST(AnthropicInbound, MessageStartHasTheEstimateWhenUsageComesLast) {
  InboundOptions options{"claude-alias", false};
  options.estimated_input_tokens = 42;
  auto encoder = anthropicInbound().streamEncoder(options);
  struct Sink : ChunkSink {
    ChatStreamEncoder* e;
    std::string out;
    void onChunk(const ChatChunk& c) override { e->onChunk(c, out); }
  } sink;
  sink.e = encoder.get();
  auto d = makeOpenAIChatCodec()->streamDecoder();
  ASSERT_FALSE(d->feed(readFixture("openai/stream_tool_calls.sse"), sink));  // usage in its last chunk
  ASSERT_FALSE(d->finish(sink));
  encoder->finish(sink.out);
  EXPECT_EQ(eventData(sink.out, "message_start").at("message").at("usage"),
            bj::parse(R"({"input_tokens":42,"output_tokens":0})"));
  EXPECT_EQ(eventData(sink.out, "message_delta").at("usage"),
            bj::parse(R"({"input_tokens":18,"output_tokens":17,"cache_read_input_tokens":64})"));
}

TEST(AnthropicInbound, MessageStartHasTheUpstreamsCountWhenTheFirstChunkCarriesIt) {
  InboundOptions options{"m", false};
  options.estimated_input_tokens = 42;
  auto encoder = anthropicInbound().streamEncoder(options);
  std::string out;
  ChatChunk first;
  first.start = true;
  first.content = "Hi";
  first.usage = Usage{.prompt_tokens = 11, .completion_tokens = 1, .cached_tokens = 3};  // Gemini reports the prompt in every chunk
  encoder->onChunk(first, out);
  ChatChunk last;
  last.finish_reason = "stop";
  last.usage = Usage{.prompt_tokens = 11, .completion_tokens = 7, .cached_tokens = 3};
  encoder->onChunk(last, out);
  encoder->finish(out);
  EXPECT_EQ(eventData(out, "message_start").at("message").at("usage"),
            bj::parse(R"({"input_tokens":8,"output_tokens":1,"cache_read_input_tokens":3})"));
  EXPECT_EQ(eventData(out, "message_delta").at("usage"),
            bj::parse(R"({"input_tokens":8,"output_tokens":7,"cache_read_input_tokens":3})"));
}

// An upstream that never reports usage: the estimate stands (message_delta leaves
// input_tokens out rather than overwrite it with 0), output is what is known.
TEST(AnthropicInbound, WithoutUpstreamUsageMessageDeltaLeavesInputOut) {
  InboundOptions options{"m", false};
  options.estimated_input_tokens = 42;
  auto encoder = anthropicInbound().streamEncoder(options);
  std::string out;
  ChatChunk chunk;
  chunk.start = true;
  chunk.content = "Hi";
  chunk.finish_reason = "stop";
  encoder->onChunk(chunk, out);
  encoder->finish(out);
  EXPECT_EQ(eventData(out, "message_start").at("message").at("usage").at("input_tokens"), 42);
  EXPECT_EQ(eventData(out, "message_delta").at("usage"), bj::parse(R"({"output_tokens":0})"));
}

TEST(AnthropicInbound, EstimatesThePromptOfAMessagesRequestOnly) {
  const std::string body = R"({"model":"m","max_tokens":64,"system":"Be brief.",
      "messages":[{"role":"user","content":"What is the weather in Paris today?"}]})";
  const std::int64_t estimate = anthropicInbound().estimatePromptTokens(body);
  EXPECT_GT(estimate, 5);
  EXPECT_EQ(estimate, estimateAnthropicTokens(bj::parse(body).as_object()));
  EXPECT_EQ(anthropicInbound().estimatePromptTokens("not json"), -1);
  EXPECT_EQ(openAIChatInbound().estimatePromptTokens(body), -1);  // its streams announce no usage up front
}

// ---- OpenAI as the vendor and as the client's API ------------------------------------

TEST(OpenAIChatCodec, DecodesTheToolCallStreamAtEverySplit) {
  auto codec = makeOpenAIChatCodec();
  const std::string stream = readFixture("openai/stream_tool_calls.sse");
  const Collected c = decodeWhole(*codec, stream);
  EXPECT_EQ(c.text, "Let me look: ünïcödé 天气");
  ASSERT_EQ(c.calls.size(), 2u);
  EXPECT_EQ(c.calls.at(0).arguments, R"({"location": "Paris"})");
  EXPECT_EQ(c.calls.at(1).name, "get_time");
  EXPECT_EQ(c.finish, "tool_calls");
  EXPECT_EQ(c.usage.prompt_tokens, 82);
  EXPECT_EQ(c.usage.cached_tokens, 64);
  EXPECT_EQ(c.usage.completion_tokens, 17);
  expectSplitInvariant(*codec, stream);
}

TEST(OpenAIChatCodec, AsksForStreamUsageAndUsesTheUpstreamModel) {
  auto codec = makeOpenAIChatCodec();
  EncodeOptions opts;
  opts.upstream_model = "gpt-4o";
  opts.stream = true;
  auto encoded = codec->encodeRequest(bj::parse(R"({"model":"alias","messages":[{"role":"user","content":"hi"}],"stream":true})").as_object(), opts);
  auto body = bj::parse(std::get<EncodedRequest>(encoded).body);
  EXPECT_EQ(body.at("model"), "gpt-4o");
  EXPECT_EQ(body.at("stream_options").at("include_usage"), true);
}

TEST(OpenAIChatInbound, AnAnthropicStreamBecomesChunksEndingWithDone) {
  auto codec = makeAnthropicCodec();
  for (bool include_usage : {false, true}) {
    auto encoder = openAIChatInbound().streamEncoder(InboundOptions{"gpt-alias", include_usage});
    struct Sink : ChunkSink {
      ChatStreamEncoder* e;
      std::string out;
      void onChunk(const ChatChunk& c) override { e->onChunk(c, out); }
    } sink;
    sink.e = encoder.get();
    auto d = codec->streamDecoder();
    ASSERT_FALSE(d->feed(readFixture("anthropic/stream_tool_use.sse"), sink));
    ASSERT_FALSE(d->finish(sink));
    encoder->finish(sink.out);
    auto events = parseSse(sink.out).events;
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().second, "[DONE]");
    std::string text, args, finish;
    bool usage_chunk = false;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
      auto& o = events[i].second.as_object();
      EXPECT_EQ(o.at("object"), "chat.completion.chunk");
      EXPECT_EQ(o.at("model"), "gpt-alias");
      auto& choices = o.at("choices").as_array();
      if (choices.empty()) {
        usage_chunk = true;
        EXPECT_EQ(o.at("usage").at("prompt_tokens"), 572);
        EXPECT_EQ(o.at("usage").at("completion_tokens"), 89);
        continue;
      }
      auto& delta = choices[0].at("delta").as_object();
      if (auto* c = delta.if_contains("content")) text += c->as_string();
      if (auto* tc = delta.if_contains("tool_calls")) {
        auto& call = tc->as_array()[0].as_object();
        if (call.contains("id")) {
          EXPECT_EQ(call.at("id"), "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
        }
        args += call.at("function").at("arguments").as_string();
      }
      if (choices[0].at("finish_reason").is_string()) finish = choices[0].at("finish_reason").as_string();
    }
    EXPECT_EQ(usage_chunk, include_usage);
    EXPECT_EQ(text, "Okay, let's check the weather für San Francisco 天气");
    EXPECT_EQ(args, R"({"location": "San Francisco, CA", "unit": "fahrenheit"})");
    EXPECT_EQ(finish, "tool_calls");
  }
}

// ---- Responses as the client's API ---------------------------------------------------

TEST(ResponsesInbound, BringsItemsIntoChatForm) {
  auto chat = responsesInbound().toChat(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 50, "stream": true,
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "18C"}
    ],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
    "tool_choice": "auto"})");
  ASSERT_TRUE(std::holds_alternative<bj::object>(chat)) << std::get<Error>(chat).message;
  EXPECT_EQ(bj::value(std::get<bj::object>(chat)), bj::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18C"}
    ],
    "model": "m", "max_tokens": 50, "stream": true,
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    "tool_choice": "auto"})"));
  auto stateful = responsesInbound().toChat(R"({"model":"m","input":"hi","previous_response_id":"resp_1"})");
  ASSERT_TRUE(std::holds_alternative<Error>(stateful));
  EXPECT_NE(std::get<Error>(stateful).message.find("previous_response_id"), std::string::npos);
}

// What only a native /v1/responses has is refused naming its field (the error's `param`),
// never dropped: the answer would differ from what the client asked for.
TEST(ResponsesInbound, RefusesWhatChatCannotCarryNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model":"m","input":"x","tools":[{"type":"web_search"}]})", "tools[0].type"},
      {R"({"model":"m","input":"x","tools":[{"type":"function","name":"f"},{"type":"file_search"}]})", "tools[1].type"},
      {R"({"model":"m","input":"x","tools":[{"type":"computer_use_preview"}]})", "tools[0].type"},
      {R"({"model":"m","input":"x","tool_choice":{"type":"web_search_preview"}})", "tool_choice"},
      {R"({"model":"m","input":"x","background":true})", "background"},
      {R"({"model":"m","input":"x","top_logprobs":3})", "top_logprobs"},
      {R"({"model":"m","input":[{"role":"user","content":"a"},{"type":"reasoning","id":"rs_1","summary":[]}]})", "input[1]"},
      {R"({"model":"m","input":"x","conversation":"conv_1"})", "conversation"},
      {R"({"model":"m","input":"x","previous_response_id":"resp_1"})", "previous_response_id"},
      {R"({"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n"}}})", "text.format.schema"},
  };
  for (const auto& [body, param] : cases) {
    auto chat = responsesInbound().toChat(body);
    ASSERT_TRUE(std::holds_alternative<Error>(chat)) << body;
    const Error& e = std::get<Error>(chat);
    EXPECT_EQ(e.kind, ErrorKind::InvalidRequest) << body;
    EXPECT_EQ(e.param, param) << body;
    EXPECT_NE(e.message.find(param), std::string::npos) << e.message;
    EXPECT_EQ(bj::parse(e.toJson()).at("error").at("param"), param);
  }
  // background: false, a null tool_choice and the string choices are fine.
  for (const char* body : {R"({"model":"m","input":"x","background":false})", R"({"model":"m","input":"x","tool_choice":null})",
                           R"({"model":"m","input":"x","tool_choice":"required"})"})
    EXPECT_TRUE(std::holds_alternative<bj::object>(responsesInbound().toChat(body))) << body;
}

TEST(ResponsesInbound, JsonSchemaFormatAndStrictToolsBecomeChatsOwn) {
  auto chat = responsesInbound().toChat(R"({"model":"m","input":"x",
    "text":{"format":{"type":"json_schema","name":"city","schema":{"type":"object"},"strict":true}},
    "tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":true}]})");
  ASSERT_TRUE(std::holds_alternative<bj::object>(chat)) << std::get<Error>(chat).message;
  const bj::object& o = std::get<bj::object>(chat);
  EXPECT_EQ(o.at("response_format"),
            bj::parse(R"({"type":"json_schema","json_schema":{"name":"city","schema":{"type":"object"},"strict":true}})"));
  EXPECT_EQ(o.at("tools").at(0).at("function").at("strict"), true);
}

TEST(OpenAIChatCodec, StreamUsageOffSendsNoStreamOptions) {
  auto codec = makeOpenAIChatCodec();
  EncodeOptions opts;
  opts.upstream_model = "llama";
  opts.stream = true;
  opts.stream_usage = false;
  auto encoded = codec->encodeRequest(bj::parse(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})").as_object(), opts);
  auto body = bj::parse(std::get<EncodedRequest>(encoded).body).as_object();
  EXPECT_EQ(body.at("stream"), true);
  EXPECT_FALSE(body.contains("stream_options"));
}

// Every OpenAI-format endpoint has its entry in a provider's `apis` list; the default
// serves all but the Responses API (translated instead).
TEST(ProviderApis, EveryOpenAIEndpointHasItsEntryAndTheDefaultLacksResponses) {
  EXPECT_EQ(providerApiOf(Endpoint::ChatCompletions), static_cast<std::uint16_t>(ProviderApi::Chat));
  EXPECT_EQ(providerApiOf(Endpoint::Responses), static_cast<std::uint16_t>(ProviderApi::Responses));
  EXPECT_EQ(providerApiOf(Endpoint::BatchCancel), static_cast<std::uint16_t>(ProviderApi::Files));
  EXPECT_EQ(providerApiOf(Endpoint::ImagesEdits), static_cast<std::uint16_t>(ProviderApi::Images));
  EXPECT_EQ(providerApiOf(Endpoint::Messages), 0);
  EXPECT_EQ(providerApiOf(Endpoint::StoredResponse), 0);
  ProviderConfig p;
  EXPECT_FALSE(p.serves(ProviderApi::Responses));
  for (auto api : {ProviderApi::Chat, ProviderApi::Completions, ProviderApi::Embeddings, ProviderApi::Moderations,
                   ProviderApi::Images, ProviderApi::Audio, ProviderApi::Rerank, ProviderApi::Files, ProviderApi::Realtime})
    EXPECT_TRUE(p.serves(api));
  EXPECT_EQ(std::size(kProviderApiNames), 10u);
  EXPECT_EQ(kProviderApiNames[3], "responses");
}

TEST(ResponsesInbound, StreamsTextAndAFunctionCallAsResponseEvents) {
  auto encoder = responsesInbound().streamEncoder(InboundOptions{"m", false});
  std::string out;
  ChatChunk a;
  a.start = true;
  a.content = "Hel";
  encoder->onChunk(a, out);
  ChatChunk b;
  b.content = "lo";
  b.tool_calls.push_back(ToolCallDelta{0, "call_9", "get_weather", "{\"ci"});
  encoder->onChunk(b, out);
  ChatChunk c;
  c.tool_calls.push_back(ToolCallDelta{0, "", "", "ty\":1}"});
  c.finish_reason = "tool_calls";
  c.usage = Usage{.prompt_tokens = 10, .completion_tokens = 4, .cached_tokens = -1};
  encoder->onChunk(c, out);
  encoder->finish(out);
  auto events = parseSse(out).events;
  std::vector<std::string> names;
  std::int64_t seq = 0;
  for (auto& [name, data] : events) {
    names.push_back(name);
    EXPECT_EQ(data.at("type"), name.c_str());
    EXPECT_EQ(data.at("sequence_number"), seq++);
  }
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
      "response.content_part.done", "response.output_item.done", "response.output_item.added",
      "response.function_call_arguments.delta", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done", "response.completed"};
  EXPECT_EQ(names, expected);
  const auto& done = events.back().second.at("response").as_object();
  EXPECT_EQ(done.at("status"), "completed");
  const auto& output = done.at("output").as_array();
  ASSERT_EQ(output.size(), 2u);
  EXPECT_EQ(output[0].at("content").at(0).at("text"), "Hello");
  EXPECT_EQ(output[1].at("arguments"), "{\"city\":1}");
  EXPECT_EQ(output[1].at("call_id"), "call_9");
  EXPECT_EQ(done.at("usage").at("total_tokens"), 14);
}

// ---- pass-through --------------------------------------------------------------------

TEST(PassThrough, HidesTheUsageChunkTheGatewayAskedForAtEverySplit) {
  const std::string stream = readFixture("openai/stream_tool_calls.sse");
  const auto usage_at = stream.find("data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[]");
  ASSERT_NE(usage_at, std::string::npos);
  const auto usage_end = stream.find("\n\n", usage_at) + 2;
  const std::string expected = stream.substr(0, usage_at) + stream.substr(usage_end);
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    auto t = makePassThroughTranslator(WireFormat::OpenAIChat, true);
    RequestContext ctx;
    std::string out(t->onStreamBytes(std::string_view(stream).substr(0, cut), false, ctx));
    out += t->onStreamBytes(std::string_view(stream).substr(cut), true, ctx);
    ASSERT_EQ(out, expected) << "split at " << cut;
    ASSERT_EQ(ctx.usage.prompt_tokens, 82);
    ASSERT_EQ(ctx.usage.cached_tokens, 64);
  }
  // Without hiding, the bytes are the upstream's, untouched.
  auto t = makePassThroughTranslator(WireFormat::OpenAIChat, false);
  RequestContext ctx;
  EXPECT_EQ(t->onStreamBytes(stream, true, ctx), stream);
  EXPECT_EQ(ctx.usage.completion_tokens, 17);
}

TEST(PassThrough, MetersAnthropicStreams) {
  auto t = makePassThroughTranslator(WireFormat::Anthropic, false);
  RequestContext ctx;
  const std::string stream = readFixture("anthropic/stream_tool_use.sse");
  EXPECT_EQ(t->onStreamBytes(stream, true, ctx), stream);
  EXPECT_EQ(ctx.usage.prompt_tokens, 572);
  EXPECT_EQ(ctx.usage.completion_tokens, 89);
  EXPECT_EQ(ctx.usage.cached_tokens, 100);
}

TEST(PassThrough, RequestStreamUsageSplicesOrRewrites) {
  std::string body = R"({"model":"m","stream":true,"messages":[]} )";
  EXPECT_TRUE(requestStreamUsage(body));
  EXPECT_EQ(bj::parse(body).at("stream_options").at("include_usage"), true);
  EXPECT_EQ(bj::parse(body).at("model"), "m");
  std::string with = R"({"model":"m","stream":true,"stream_options":{"include_usage":false}})";
  EXPECT_TRUE(requestStreamUsage(with));
  EXPECT_EQ(bj::parse(with).at("stream_options").at("include_usage"), true);
  std::string already = R"({"stream_options":{"include_usage":true}})";
  EXPECT_FALSE(requestStreamUsage(already));
}

TEST(Secrets, UpstreamTextsAreScrubbed) {
  ProviderConfig p;
  p.api_key = "sk-secret-1234";
  EXPECT_EQ(scrubSecrets("bad key sk-secret-1234 given", p), "bad key [redacted] given");
}

}  // namespace translate_test
}  // namespace tahua

namespace tahua {
namespace translate_test {

TEST(PassThrough, UpstreamErrorsLoseSecretsAndGainAnOpenAIType) {
  ProviderConfig p;
  p.api_key = "az-secret-key-1";
  auto t = makePassThroughTranslator(WireFormat::OpenAIChat, false, &p);
  RequestContext ctx;
  ctx.status = 429;
  std::string body = R"({"error":{"code":"429","message":"quota for az-secret-key-1 exceeded"}})";
  t->onBody(body, ctx);
  EXPECT_EQ(bj::parse(body), bj::parse(R"({"error":{"code":"429","message":"quota for [redacted] exceeded",
                                           "type":"rate_limit_error","param":null}})"));
  // An OpenAI error that already has its shape keeps every field.
  std::string openai = R"({"error":{"message":"m","type":"invalid_request_error","param":"x","code":"c"}})";
  std::string copy = openai;
  ctx.status = 400;
  t->onBody(openai, ctx);
  EXPECT_EQ(openai, copy);
}

}  // namespace translate_test
}  // namespace tahua

namespace tahua {
namespace translate_test {

TEST(PassThrough, HidingUsageReturnsTheInputItselfWhenNothingIsCut) {
  auto t = makePassThroughTranslator(WireFormat::OpenAIChat, true);
  RequestContext ctx;
  const std::string events =
      "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\ndata: {\"choices\":[{\"delta\":{}}]}\n\n";
  std::string_view out = t->onStreamBytes(events, false, ctx);
  EXPECT_EQ(out, events);
  EXPECT_EQ(out.data(), events.data());  // a view: no copy, no per-stream buffer
}

}  // namespace translate_test
}  // namespace tahua
