#include "translate/gemini_codec.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tahua {
namespace gemini_codec_test {  // named, not anonymous: eight test files compile as one unit

namespace json = boost::json;

// Tests run from the source root (ctest WORKING_DIRECTORY); fall back for a build dir.
std::string fixture(const std::string& name) {
  for (const std::string prefix : {"tests/fixtures/gemini/", "../tests/fixtures/gemini/"}) {
    std::ifstream in(prefix + name, std::ios::binary);
    if (in) {
      std::ostringstream ss;
      ss << in.rdbuf();
      return ss.str();
    }
  }
  ADD_FAILURE() << "fixture not found: " << name;
  return {};
}

json::object parseObject(std::string_view text) {
  json::value v = json::parse(text);
  return v.as_object();
}

std::variant<EncodedRequest, Error> encode(const json::object& chat, bool stream = false,
                                           std::string model = "gemini-2.0-flash") {
  EncodeOptions opts;
  opts.upstream_model = std::move(model);
  opts.stream = stream;
  return makeGeminiCodec()->encodeRequest(chat, opts);
}

json::object encodeOk(const json::object& chat) {
  auto r = encode(chat);
  if (auto* e = std::get_if<Error>(&r)) {
    ADD_FAILURE() << "unexpected error: " << e->message;
    return {};
  }
  return parseObject(std::get<EncodedRequest>(r).body);
}

Error encodeErr(const json::object& chat) {
  auto r = encode(chat);
  if (!std::holds_alternative<Error>(r)) {
    ADD_FAILURE() << "expected an error, got body " << std::get<EncodedRequest>(r).body;
    return {};
  }
  return std::get<Error>(r);
}

json::object userChat(json::object extra = {}) {
  json::object chat{{"model", "m"}, {"messages", json::array{json::object{{"role", "user"}, {"content", "hi"}}}}};
  for (auto& kv : extra) chat[kv.key()] = kv.value();
  return chat;
}

// ---------------------------------------------------------------------------------
// encodeRequest

TEST(GeminiCodec, EncodesGoldenRequest) {
  auto r = encode(parseObject(fixture("chat_request.json")));
  ASSERT_TRUE(std::holds_alternative<EncodedRequest>(r)) << std::get<Error>(r).message;
  const auto& req = std::get<EncodedRequest>(r);
  EXPECT_EQ(req.path, "/models/gemini-2.0-flash:generateContent");
  EXPECT_EQ(req.content_type, "application/json");
  EXPECT_EQ(req.accept, "application/json");
  json::value got = json::parse(req.body);
  json::value want = json::parse(fixture("chat_request.expected.json"));
  EXPECT_EQ(got, want) << "got:  " << req.body << "\nwant: " << json::serialize(want);
}

TEST(GeminiCodec, StreamingPathAndAccept) {
  auto r = encode(userChat(), /*stream=*/true);
  ASSERT_TRUE(std::holds_alternative<EncodedRequest>(r));
  EXPECT_EQ(std::get<EncodedRequest>(r).path, "/models/gemini-2.0-flash:streamGenerateContent?alt=sse");
  EXPECT_EQ(std::get<EncodedRequest>(r).accept, "text/event-stream");
}

TEST(GeminiCodec, ModelNameCannotInjectPath) {
  auto ok = encode(userChat(), false, "models/gemini-1.5-pro-002");
  ASSERT_TRUE(std::holds_alternative<EncodedRequest>(ok));
  EXPECT_EQ(std::get<EncodedRequest>(ok).path, "/models/gemini-1.5-pro-002:generateContent");
  for (std::string bad : std::vector<std::string>{"", "..", ".hidden", "a/b", "../../v1/files", "x?key=1", "x#f", "gemini:countTokens",
                          "gemini pro", "gemini%2F", std::string("a\0b", 3), "gemini\xC3\xA9", "a\r\nHost: x"}) {
    auto r = encode(userChat(), false, bad);
    ASSERT_TRUE(std::holds_alternative<Error>(r)) << bad;
    EXPECT_EQ(std::get<Error>(r).kind, ErrorKind::InvalidRequest);
    EXPECT_NE(std::get<Error>(r).message.find("'model'"), std::string::npos);
  }
}

TEST(GeminiCodec, ToolChoiceModes) {
  auto mode = [](json::value choice) {
    json::object body = encodeOk(userChat({{"tool_choice", choice}}));
    return json::serialize(body.at("toolConfig"));
  };
  EXPECT_EQ(mode("auto"), R"({"functionCallingConfig":{"mode":"AUTO"}})");
  EXPECT_EQ(mode("none"), R"({"functionCallingConfig":{"mode":"NONE"}})");
  EXPECT_EQ(mode("required"), R"({"functionCallingConfig":{"mode":"ANY"}})");
  EXPECT_EQ(mode(json::parse(R"({"type":"function","function":{"name":"get_time"}})")),
            R"({"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_time"]}})");
  EXPECT_NE(encodeErr(userChat({{"tool_choice", "sometimes"}})).message.find("'tool_choice'"), std::string::npos);
  EXPECT_NE(encodeErr(userChat({{"tool_choice", json::parse(R"({"type":"function"})")}})).message.find("tool_choice"),
            std::string::npos);
}

TEST(GeminiCodec, InvalidToolArgumentsAreNamed) {
  for (std::string_view args : {R"({"city": )", "[1,2]", "42", "not json"}) {
    json::object chat = parseObject(R"({"messages":[{"role":"user","content":"hi"},
      {"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},
                                        {"id":"c2","type":"function","function":{"name":"g","arguments":""}}]}]})");
    chat["messages"].as_array()[1].as_object()["tool_calls"].as_array()[1].as_object()["function"].as_object()["arguments"] =
        args;
    Error e = encodeErr(chat);
    EXPECT_EQ(e.kind, ErrorKind::InvalidRequest);
    EXPECT_EQ(e.httpStatus(), 400);
    EXPECT_NE(e.message.find("messages[1].tool_calls[1].function.arguments"), std::string::npos) << e.message;
  }
}

TEST(GeminiCodec, EmptyArgumentsBecomeEmptyObject) {
  json::object body = encodeOk(parseObject(R"({"messages":[{"role":"user","content":"hi"},
      {"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"now","arguments":""}}]},
      {"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"[1,"},{"type":"text","text":"2]"}]}]})"));
  EXPECT_EQ(json::serialize(body.at("contents")),
            R"([{"role":"user","parts":[{"text":"hi"}]},)"
            R"({"role":"model","parts":[{"functionCall":{"name":"now","args":{}}}]},)"
            R"({"role":"user","parts":[{"functionResponse":{"name":"now","response":{"content":"[1,2]"}}}]}])");
}

TEST(GeminiCodec, ToolResultNeedsAKnownCall) {
  Error e = encodeErr(parseObject(R"({"messages":[{"role":"user","content":"hi"},
      {"role":"tool","tool_call_id":"nope","content":"x"}]})"));
  EXPECT_NE(e.message.find("messages[1].tool_call_id"), std::string::npos) << e.message;
  e = encodeErr(parseObject(R"({"messages":[{"role":"tool","content":"x"}]})"));
  EXPECT_NE(e.message.find("messages[0].tool_call_id"), std::string::npos) << e.message;
}

TEST(GeminiCodec, ConsecutiveRolesMergeAndSystemIsLifted) {
  json::object body = encodeOk(parseObject(R"({"messages":[
      {"role":"user","content":"one"},{"role":"system","content":"be brief"},{"role":"user","content":"two"},
      {"role":"assistant","content":"a"},{"role":"assistant","content":[{"type":"text","text":"b"}]},
      {"role":"user","content":""}]})"));
  EXPECT_EQ(json::serialize(body.at("contents")),
            R"([{"role":"user","parts":[{"text":"one"},{"text":"two"}]},{"role":"model","parts":[{"text":"a"},{"text":"b"}]}])");
  EXPECT_EQ(json::serialize(body.at("systemInstruction")), R"({"parts":[{"text":"be brief"}]})");
}

TEST(GeminiCodec, GenerationConfig) {
  json::object body = encodeOk(userChat({{"max_tokens", 100},
                                         {"max_completion_tokens", 200},
                                         {"stop", "STOP!"},
                                         {"response_format", json::parse(R"({"type":"json_object"})")},
                                         {"seed", 7},
                                         {"presence_penalty", 0.5}}));
  EXPECT_EQ(body.at("generationConfig"),
            json::parse(R"({"maxOutputTokens":200,"stopSequences":["STOP!"],"responseMimeType":"application/json",
                            "seed":7,"presencePenalty":0.5})"));
  EXPECT_FALSE(encodeOk(userChat()).contains("generationConfig"));
  body = encodeOk(userChat({{"response_format", json::parse(R"({"type":"json_schema","json_schema":{"name":"x",
      "schema":{"type":"object","properties":{"a":{"type":"string"}}}}})")}}));
  EXPECT_EQ(body.at("generationConfig").at("responseSchema").at("properties").at("a").at("type"), "string");
}

TEST(GeminiCodec, RejectsWhatGeminiCannotExpress) {
  struct Case {
    json::object extra;
    std::string param;
  };
  std::vector<Case> cases = {
      {{{"n", 2}}, "'n'"},
      {{{"n", "1"}}, "'n'"},
      {{{"max_tokens", -1}}, "'max_tokens'"},
      {{{"max_tokens", 1.5}}, "'max_tokens'"},
      {{{"temperature", "hot"}}, "'temperature'"},
      {{{"stop", json::array{1}}}, "'stop'"},
      {{{"tools", json::parse(R"([{"type":"code_interpreter"}])")}}, "'tools[0].type'"},
      {{{"tools", json::parse(R"([{"type":"function","function":{}}])")}}, "'tools[0].function.name'"},
      {{{"tools", "x"}}, "'tools'"},
      {{{"response_format", json::parse(R"({"type":"yaml"})")}}, "'response_format.type'"},
  };
  for (auto& c : cases) {
    Error e = encodeErr(userChat(c.extra));
    EXPECT_EQ(e.kind, ErrorKind::InvalidRequest);
    EXPECT_NE(e.message.find(c.param), std::string::npos) << e.message << " (want " << c.param << ")";
  }
  EXPECT_EQ(encodeOk(userChat({{"n", 1}})).at("generationConfig").at("candidateCount"), 1);
}

TEST(GeminiCodec, MalformedMessagesAreErrorsNotCrashes) {
  std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "'messages'"},
      {R"({"messages":{}})", "'messages'"},
      {R"({"messages":[]})", "'messages'"},
      {R"({"messages":[{"role":"system","content":"only system"}]})", "'messages'"},
      {R"({"messages":[1]})", "'messages[0]'"},
      {R"({"messages":[{"content":"x"}]})", "'messages[0].role'"},
      {R"({"messages":[{"role":"robot","content":"x"}]})", "'messages[0].role'"},
      {R"({"messages":[{"role":"user","content":5}]})", "'messages[0].content'"},
      {R"({"messages":[{"role":"user","content":[5]}]})", "'messages[0].content[0]'"},
      {R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", "'messages[0].content[0].text'"},
      {R"({"messages":[{"role":"user","content":[{"type":"video"}]}]})", "'messages[0].content[0].type'"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
       "'messages[0].content[0].image_url.url'"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]})",
       "'messages[0].content[0].image_url.url'"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:nocomma"}}]}]})",
       "'messages[0].content[0].image_url.url'"},
      {R"({"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}]})",
       "'messages[0].content'"},
      {R"({"messages":[{"role":"assistant","tool_calls":{}}]})", "'messages[0].tool_calls'"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":""}}]}]})",
       "'messages[0].tool_calls[0].function.name'"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":7}}]}]})",
       "'messages[0].tool_calls[0].function.arguments'"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f"}}]},
                       {"role":"tool","tool_call_id":"c","content":{}}]})",
       "'messages[1].content'"},
  };
  for (auto& [text, param] : cases) {
    Error e = encodeErr(parseObject(text));
    EXPECT_EQ(e.kind, ErrorKind::InvalidRequest) << text;
    EXPECT_NE(e.message.find(param), std::string::npos) << text << " -> " << e.message;
  }
}

TEST(GeminiCodec, ImageUrlsAndAudio) {
  json::object body = encodeOk(parseObject(R"({"messages":[{"role":"user","content":[
      {"type":"image_url","image_url":{"url":"https://x.test/a/B.PNG#frag"}},
      {"type":"image_url","image_url":{"url":"https://x.test/photo"}},
      {"type":"image_url","image_url":{"url":"data:;base64,QUJD"}},
      {"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}}]}]})"));
  EXPECT_EQ(body.at("contents").at(0).at("parts"), json::parse(R"([
      {"fileData":{"mimeType":"image/png","fileUri":"https://x.test/a/B.PNG#frag"}},
      {"fileData":{"mimeType":"image/jpeg","fileUri":"https://x.test/photo"}},
      {"inlineData":{"mimeType":"image/jpeg","data":"QUJD"}},
      {"inlineData":{"mimeType":"audio/wav","data":"UklGRg=="}}])"));
}

TEST(GeminiCodec, AssistantRefusalPartIsText) {
  json::object body = encodeOk(parseObject(R"({"messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":[{"type":"refusal","refusal":"I can't help with that."}]}]})"));
  EXPECT_EQ(json::serialize(body.at("contents").at(1)),
            R"({"role":"model","parts":[{"text":"I can't help with that."}]})");
}

TEST(GeminiCodec, ToolWithoutParametersOmitsSchema) {
  json::object body = encodeOk(userChat({{"tools", json::parse(R"([{"type":"function","function":{"name":"now",
      "parameters":{"type":"object","properties":{}}}}])")}}));
  EXPECT_EQ(json::serialize(body.at("tools")), R"([{"functionDeclarations":[{"name":"now"}]}])");
}

// ---------------------------------------------------------------------------------
// decodeResponse

std::variant<ChatResult, Error> decode(std::string_view body) { return makeGeminiCodec()->decodeResponse(body); }

TEST(GeminiCodec, DecodesTextResponse) {
  auto r = decode(fixture("response_text.json"));
  ASSERT_TRUE(std::holds_alternative<ChatResult>(r)) << std::get<Error>(r).message;
  const ChatResult& res = std::get<ChatResult>(r);
  EXPECT_EQ(res.id, "mAitZ9i5JOWb1PIPyN6RqQc");
  EXPECT_EQ(res.model, "gemini-2.0-flash");
  EXPECT_EQ(res.content, "Lisbon is sunny today, around 21 °C.");
  EXPECT_TRUE(res.tool_calls.empty());
  EXPECT_EQ(res.finish_reason, "stop");
  EXPECT_EQ(res.usage.prompt_tokens, 57);
  EXPECT_EQ(res.usage.completion_tokens, 12);
  EXPECT_EQ(res.usage.cached_tokens, 32);
}

TEST(GeminiCodec, DecodesFunctionCallResponse) {
  auto r = decode(fixture("response_function_call.json"));
  ASSERT_TRUE(std::holds_alternative<ChatResult>(r)) << std::get<Error>(r).message;
  const ChatResult& res = std::get<ChatResult>(r);
  EXPECT_EQ(res.content, "Let me check.");
  EXPECT_EQ(res.finish_reason, "tool_calls");
  ASSERT_EQ(res.tool_calls.size(), 2u);
  EXPECT_EQ(res.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(res.tool_calls[0].arguments), json::parse(R"({"city":"Lisbon","unit":"celsius"})"));
  EXPECT_EQ(res.tool_calls[1].name, "get_time");
  EXPECT_EQ(json::parse(res.tool_calls[1].arguments), json::parse(R"({"timezone":"Europe/Lisbon"})"));
  for (const auto& c : res.tool_calls) {
    EXPECT_TRUE(c.id.starts_with("call_")) << c.id;
    EXPECT_EQ(c.id.size(), 5u + 24u);
  }
  EXPECT_NE(res.tool_calls[0].id, res.tool_calls[1].id);
  EXPECT_EQ(res.usage.prompt_tokens, 120);
  EXPECT_EQ(res.usage.completion_tokens, 31);
  EXPECT_EQ(res.usage.cached_tokens, -1);
}

TEST(GeminiCodec, FinishReasons) {
  auto finish = [](std::string_view reason) {
    std::string body = R"({"candidates":[{"content":{"role":"model","parts":[{"text":"x"}]},"finishReason":")" +
                       std::string(reason) + R"("}]})";
    auto r = decode(body);
    return std::holds_alternative<ChatResult>(r) ? std::get<ChatResult>(r).finish_reason : "error";
  };
  EXPECT_EQ(finish("STOP"), "stop");
  EXPECT_EQ(finish("MAX_TOKENS"), "length");
  for (auto r : {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII"}) EXPECT_EQ(finish(r), "content_filter");
  EXPECT_EQ(finish("OTHER"), "stop");
  EXPECT_EQ(finish("SOMETHING_NEW"), "stop");
}

TEST(GeminiCodec, SafetyStopWithoutContentAndBlockedPrompt) {
  auto r = decode(R"({"candidates":[{"finishReason":"SAFETY","index":0}],"usageMetadata":{"promptTokenCount":9}})");
  ASSERT_TRUE(std::holds_alternative<ChatResult>(r));
  EXPECT_EQ(std::get<ChatResult>(r).finish_reason, "content_filter");
  EXPECT_EQ(std::get<ChatResult>(r).content, "");
  EXPECT_EQ(std::get<ChatResult>(r).usage.prompt_tokens, 9);

  r = decode(R"({"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[]},"usageMetadata":{"promptTokenCount":5,"totalTokenCount":5}})");
  ASSERT_TRUE(std::holds_alternative<ChatResult>(r));
  EXPECT_EQ(std::get<ChatResult>(r).finish_reason, "content_filter");
  EXPECT_EQ(std::get<ChatResult>(r).content, "");
  EXPECT_TRUE(std::get<ChatResult>(r).tool_calls.empty());
}

TEST(GeminiCodec, ThoughtPartsAreNotAnswerText) {
  auto r = decode(R"({"candidates":[{"content":{"parts":[{"text":"thinking...","thought":true},{"text":"42"}]},
      "finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":1,"thoughtsTokenCount":20}})");
  ASSERT_TRUE(std::holds_alternative<ChatResult>(r));
  EXPECT_EQ(std::get<ChatResult>(r).content, "42");
  EXPECT_EQ(std::get<ChatResult>(r).usage.completion_tokens, 21);
}

TEST(GeminiCodec, MalformedResponsesAreErrors) {
  for (std::string_view body :
       {"", "not json", "[]", "{", R"({"candidates":{}})", R"({"candidates":[1]})", R"({})",
        R"({"candidates":[{"content":[]}]})", R"({"candidates":[{"content":{"parts":{}}}]})",
        R"({"candidates":[{"content":{"parts":[7]}}]})", R"({"candidates":[{"content":{"parts":[{"text":7}]}}]})",
        R"({"candidates":[{"content":{"parts":[{"functionCall":{"args":{}}}]}}]})",
        R"({"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":[1]}}]}}]})",
        R"({"error":{"code":500,"message":"boom","status":"INTERNAL"}})", "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\xff\"}]}}]}"}) {
    auto r = decode(body);
    ASSERT_TRUE(std::holds_alternative<Error>(r)) << body;
    EXPECT_EQ(std::get<Error>(r).kind, ErrorKind::UpstreamBadResponse) << body;
  }
}

// ---------------------------------------------------------------------------------
// Streaming

struct Collect : ChunkSink {
  std::vector<ChatChunk> chunks;
  void onChunk(const ChatChunk& c) override { chunks.push_back(c); }
};

// A comparable rendering of chunks; invented tool call ids are checked, then masked.
std::string render(const std::vector<ChatChunk>& chunks) {
  std::string out;
  for (const auto& c : chunks) {
    out += "start=" + std::to_string(c.start) + " id=" + c.id + " model=" + c.model + " content=[" + c.content + "]";
    for (const auto& t : c.tool_calls) {
      EXPECT_TRUE(t.id.starts_with("call_") && t.id.size() == 29) << t.id;
      out += " tool{" + std::to_string(t.index) + "," + t.name + "," + t.arguments + "}";
    }
    out += " finish=" + c.finish_reason;
    if (c.usage)
      out += " usage=" + std::to_string(c.usage->prompt_tokens) + "/" + std::to_string(c.usage->completion_tokens) + "/" +
             std::to_string(c.usage->cached_tokens);
    out += "\n";
  }
  return out;
}

struct StreamRun {
  std::vector<ChatChunk> chunks;
  std::optional<Error> feed_error;
  std::optional<Error> finish_error;
};

StreamRun runStream(const std::vector<std::string_view>& pieces) {
  StreamRun run;
  Collect sink;
  auto dec = makeGeminiCodec()->streamDecoder();
  for (auto p : pieces) {
    if (auto e = dec->feed(p, sink)) {
      run.feed_error = e;
      break;
    }
  }
  if (!run.feed_error) run.finish_error = dec->finish(sink);
  run.chunks = std::move(sink.chunks);
  return run;
}

std::string toCrlf(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\r\n";
    else out += c;
  }
  return out;
}

const char* kExpectedStream =
    "start=1 id=pCjtZ7fXA4mR1PIP8Kb1yA4 model=gemini-2.0-flash content=[The weather in Lisbon] finish= usage=42/0/-1\n"
    "start=0 id= model= content=[ is sunny — 21 °C 🌞. Checking the time…] finish= usage=42/0/-1\n"
    "start=0 id= model= content=[] tool{0,get_time,{\"timezone\":\"Europe/Lisbon\"}} finish=tool_calls usage=42/17/8\n";

TEST(GeminiStream, DecodesFixture) {
  std::string sse = fixture("stream.sse");
  StreamRun run = runStream({sse});
  EXPECT_FALSE(run.feed_error);
  EXPECT_FALSE(run.finish_error) << run.finish_error->message;
  EXPECT_EQ(render(run.chunks), kExpectedStream);
}

TEST(GeminiStream, AnySplitGivesTheSameChunks) {
  const std::string lf = fixture("stream.sse");
  const std::string crlf = toCrlf(lf);
  // The fixture holds 2-, 3- and 4-byte UTF-8 characters, so some cuts fall inside one.
  ASSERT_NE(lf.find("\xF0\x9F\x8C\x9E"), std::string::npos);
  for (const std::string* input : {&lf, &crlf}) {
    std::string_view in(*input);
    for (std::size_t cut = 0; cut <= in.size(); ++cut) {
      StreamRun run = runStream({in.substr(0, cut), in.substr(cut)});
      ASSERT_FALSE(run.feed_error) << "cut " << cut;
      ASSERT_FALSE(run.finish_error) << "cut " << cut;
      ASSERT_EQ(render(run.chunks), kExpectedStream) << "cut " << cut;
    }
    std::vector<std::string_view> bytes;
    for (std::size_t i = 0; i < in.size(); ++i) bytes.push_back(in.substr(i, 1));
    StreamRun run = runStream(bytes);
    ASSERT_FALSE(run.finish_error);
    ASSERT_EQ(render(run.chunks), kExpectedStream) << "byte by byte";
  }
}

TEST(GeminiStream, SplitInsideAMultiByteCharacter) {
  const std::string sse = fixture("stream.sse");
  std::size_t emoji = sse.find("\xF0\x9F\x8C\x9E");
  ASSERT_NE(emoji, std::string::npos);
  std::string_view in(sse);
  StreamRun run = runStream({in.substr(0, emoji + 2), in.substr(emoji + 2, 1), in.substr(emoji + 3)});
  EXPECT_FALSE(run.finish_error);
  EXPECT_EQ(render(run.chunks), kExpectedStream);
}

TEST(GeminiStream, TruncatedStreamIsAnError) {
  const std::string sse = fixture("stream.sse");
  // Cut before the event carrying finishReason completes.
  std::size_t last = sse.rfind("data: ");
  for (std::size_t cut : {std::size_t{0}, last, last + 40, sse.size() - 10}) {
    StreamRun run = runStream({std::string_view(sse).substr(0, cut)});
    EXPECT_FALSE(run.feed_error) << cut;
    ASSERT_TRUE(run.finish_error) << cut;
    EXPECT_EQ(run.finish_error->kind, ErrorKind::UpstreamTruncated);
  }
}

TEST(GeminiStream, LastEventWithoutBlankLineStillCounts) {
  std::string sse = fixture("stream.sse");
  sse.resize(sse.size() - 2);  // the upstream closed right after the JSON
  StreamRun run = runStream({sse});
  EXPECT_FALSE(run.finish_error);
  EXPECT_EQ(render(run.chunks), kExpectedStream);
}

TEST(GeminiStream, ErrorEvent) {
  StreamRun run = runStream({"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}]}}]}\n\n",
                             "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\n\n",
                             "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"never\"}]},\"finishReason\":\"STOP\"}]}\n\n"});
  ASSERT_TRUE(run.feed_error);
  EXPECT_NE(run.feed_error->message.find("The model is overloaded."), std::string::npos);
  EXPECT_NE(run.feed_error->message.find("UNAVAILABLE"), std::string::npos);
  ASSERT_EQ(run.chunks.size(), 1u);
  EXPECT_TRUE(run.chunks[0].start);
  EXPECT_EQ(run.chunks[0].content, "Hi");
}

TEST(GeminiStream, GarbageEventsAreErrors) {
  for (std::string_view bad : {"data: nope\n\n", "data: [1]\n\n", "data: {\"candidates\":7}\n\n",
                               "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\xc3\"}]}}]}\n\n"}) {
    StreamRun run = runStream({bad});
    ASSERT_TRUE(run.feed_error) << bad;
    EXPECT_TRUE(run.chunks.empty());
  }
  // Comments, keep-alives and empty data are not events worth an error.
  StreamRun run = runStream({": keep-alive\n\ndata:\n\n", "data: {\"candidates\":[{\"finishReason\":\"STOP\"}]}\n\n"});
  EXPECT_FALSE(run.feed_error);
  EXPECT_FALSE(run.finish_error);
  ASSERT_EQ(run.chunks.size(), 1u);
  EXPECT_TRUE(run.chunks[0].start);
  EXPECT_EQ(run.chunks[0].finish_reason, "stop");
}

TEST(GeminiStream, SeveralFunctionCallsGetIndexes) {
  StreamRun run = runStream(
      {"data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"a\",\"args\":{\"x\":1}}},"
       "{\"functionCall\":{\"name\":\"b\"}}]}}]}\n\n"
       "data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"c\",\"args\":{}}}]},"
       "\"finishReason\":\"STOP\"}]}\n\n"});
  ASSERT_FALSE(run.finish_error);
  ASSERT_EQ(run.chunks.size(), 2u);
  ASSERT_EQ(run.chunks[0].tool_calls.size(), 2u);
  EXPECT_EQ(run.chunks[0].tool_calls[0].index, 0);
  EXPECT_EQ(run.chunks[0].tool_calls[0].arguments, "{\"x\":1}");
  EXPECT_EQ(run.chunks[0].tool_calls[1].index, 1);
  EXPECT_EQ(run.chunks[0].tool_calls[1].arguments, "{}");
  ASSERT_EQ(run.chunks[1].tool_calls.size(), 1u);
  EXPECT_EQ(run.chunks[1].tool_calls[0].index, 2);
  EXPECT_EQ(run.chunks[1].finish_reason, "tool_calls");
}

TEST(GeminiStream, BlockedPromptEndsWithContentFilter) {
  StreamRun run = runStream({"data: {\"promptFeedback\":{\"blockReason\":\"PROHIBITED_CONTENT\"},"
                             "\"usageMetadata\":{\"promptTokenCount\":4,\"totalTokenCount\":4}}\r\n\r\n"});
  EXPECT_FALSE(run.finish_error);
  ASSERT_EQ(run.chunks.size(), 1u);
  EXPECT_EQ(run.chunks[0].finish_reason, "content_filter");
  EXPECT_EQ(run.chunks[0].content, "");
}

TEST(GeminiStream, OversizedEventIsAnError) {
  auto dec = makeGeminiCodec()->streamDecoder();
  Collect sink;
  std::string big(9 * 1024 * 1024, 'a');
  auto e = dec->feed("data: " + big, sink);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, ErrorKind::UpstreamEventTooLarge);
  EXPECT_TRUE(dec->feed("more", sink));  // sticky
}

// ---------------------------------------------------------------------------------
// decodeError

TEST(GeminiCodec, DecodesErrorBody) {
  auto codec = makeGeminiCodec();
  UpstreamErrorInfo info = codec->decodeError(
      429, R"({"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}})");
  EXPECT_EQ(info.status, 429);
  EXPECT_EQ(info.type, "RESOURCE_EXHAUSTED");
  EXPECT_EQ(info.message, "Resource has been exhausted (e.g. check quota).");

  info = codec->decodeError(400, R"([{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT"}}])");
  EXPECT_EQ(info.status, 400);
  EXPECT_EQ(info.type, "INVALID_ARGUMENT");

  info = codec->decodeError(503, "<html>Service Unavailable</html>");
  EXPECT_EQ(info.status, 503);
  EXPECT_EQ(info.type, "");
  EXPECT_FALSE(info.message.empty());

  info = codec->decodeError(0, R"({"error":{"code":404,"message":"models/x is not found","status":"NOT_FOUND"}})");
  EXPECT_EQ(info.status, 404);
  info = codec->decodeError(200, R"({"error":"weird"})");
  EXPECT_EQ(info.status, 502);
}

}  // namespace gemini_codec_test
}  // namespace tahua
