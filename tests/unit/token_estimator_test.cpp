#include "tokens/token_estimator.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <cmath>
#include <string>

namespace tahua {
namespace token_estimator_test {  // named, not anonymous: eight test files compile as one unit

namespace json = boost::json;

std::int64_t est(std::string_view s) { return defaultTokenCounter().count(s); }

// Reference counts were measured with cl100k_base (tiktoken's encoding for GPT-4 and
// GPT-3.5). The estimate must land within `tolerance` of them (a fraction, at least 1).
void expectNear(std::string_view text, std::int64_t reference, double tolerance) {
  const std::int64_t got = est(text);
  const double allowed = std::max(1.0, std::ceil(static_cast<double>(reference) * tolerance));
  EXPECT_LE(std::llabs(got - reference), static_cast<std::int64_t>(allowed))
      << "\"" << text << "\": estimated " << got << ", cl100k " << reference;
}

TEST(TokenEstimator, EnglishWithinFifteenPercentOfCl100k) {
  EXPECT_EQ(est("Hello, world!"), 4);  // Hello | , | world | !
  expectNear("The quick brown fox jumps over the lazy dog.", 10, 0.15);
  expectNear("In 1969, Neil Armstrong became the first person to walk on the Moon.", 17, 0.15);
  expectNear("Could you please summarize the following article in three bullet points?", 12, 0.15);
  expectNear("I don't think we're ready for tomorrow's launch, but let's try anyway.", 18, 0.15);
}

TEST(TokenEstimator, CjkCountsAboutOnePerCharacter) {
  // 15 ideographs: cl100k 13.
  expectNear("人工智能正在改变我们的生活方式", 13, 0.5);
  // Kanji, katakana and hiragana: 12 characters, cl100k 13.
  expectNear("東京タワーに行きたいです", 13, 0.25);
  // Hangul: 10 characters with a space, cl100k 9.
  expectNear("한국어를 공부합니다", 9, 0.3);
  // Roughly linear in characters, 1-1.5 per ideograph.
  std::string zh;
  for (int i = 0; i < 100; ++i) zh += "我";
  EXPECT_GE(est(zh), 100);
  EXPECT_LE(est(zh), 150);
}

TEST(TokenEstimator, OtherScriptsAndMixedText) {
  expectNear("Привет, как дела?", 8, 0.3);
  expectNear("naïve café résumé", 7, 0.3);
  // cl100k: 39 for this mix of Chinese, code, English and an emoji.
  expectNear("请把这段 Python 代码翻译成 C++：def add(a, b): return a + b。谢谢！Thanks a lot 🙏", 39, 0.2);
  // Digits group by three: "1234567" is 123|456|7.
  EXPECT_EQ(est("1234567"), 3);
}

TEST(TokenEstimator, EmptyAndWhitespace) {
  EXPECT_EQ(est(""), 0);
  EXPECT_EQ(est(" "), 0);
  EXPECT_LE(est("   \n\n  \t"), 3);
  EXPECT_EQ(est("word"), 1);
  EXPECT_EQ(est(" word "), 1);
}

TEST(TokenEstimator, InvalidUtf8IsCountedNotFatal) {
  // Lone continuation bytes, a truncated sequence, an overlong form, a surrogate, > U+10FFFF.
  for (std::string_view bad : {"\x80", "\xBF\xBF", "\xE4\xBD", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF\xFE"}) {
    EXPECT_GE(est(bad), 1) << "bytes: " << bad.size();
    EXPECT_LE(est(bad), static_cast<std::int64_t>(bad.size()));
  }
  // A character cut at the end of the text, after valid text.
  EXPECT_EQ(est("abc\xE4\xBD"), 1 + 2);
  std::string with_nul("a\0b", 3);
  EXPECT_GE(est(with_nul), 2);
  // Every byte value, in every position, never crashes.
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (std::size_t cut = 0; cut < all.size(); ++cut) EXPECT_GE(est(std::string_view(all).substr(cut)), 1);
}

TEST(TokenEstimator, ScalesLinearly) {
  const std::string sentence = "The quick brown fox jumps over the lazy dog. ";
  std::string text;
  for (int i = 0; i < 1000; ++i) text += sentence;
  const std::int64_t one = est(sentence);
  const std::int64_t many = est(text);
  EXPECT_GE(many, one * 1000 - 1000);
  EXPECT_LE(many, one * 1000 + 1000);
  // 1 MB of text is counted (allocation-free, single pass) without trouble.
  std::string big(1 << 20, 'x');
  EXPECT_GT(est(big), 0);
}

TEST(TokenEstimator, CounterIsAnInterface) {
  struct Fixed : TokenCounter {
    std::int64_t count(std::string_view text) const override { return static_cast<std::int64_t>(text.size()); }
  } bytes;
  json::object req = json::parse(R"({"messages":[{"role":"user","content":"abcd"}]})").as_object();
  // reply priming 3 + message 3 + "user" 4 + "abcd" 4
  EXPECT_EQ(estimateChatTokens(req, bytes), 14);
  EXPECT_EQ(&defaultTokenCounter(), &defaultTokenCounter());
}

TEST(TokenEstimator, ChatRequestsGrowWithContent) {
  json::object small = json::parse(R"({"model":"m","messages":[{"role":"user","content":"Hi"}]})").as_object();
  const std::int64_t base = estimateChatTokens(small);
  EXPECT_GT(base, 0);
  EXPECT_LE(base, 12);  // cl100k with OpenAI's framing: 8

  json::object bigger = json::parse(R"({"model":"m","messages":[
      {"role":"system","content":"You are a helpful assistant."},
      {"role":"user","name":"ana","content":[{"type":"text","text":"What is in this image?"},
                                           {"type":"image_url","image_url":{"url":"https://x/y.png"}}]},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
          "function":{"name":"lookup","arguments":"{\"query\":\"image contents\"}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"A cat on a sofa."}],
    "tools":[{"type":"function","function":{"name":"lookup","description":"Search the web.",
      "parameters":{"type":"object","properties":{"query":{"type":"string"}}}}}]})")
                            .as_object();
  const std::int64_t full = estimateChatTokens(bigger);
  EXPECT_GT(full, base + 765);  // the image alone is 765

  // Each addition counts.
  json::object no_tools = bigger;
  no_tools.erase("tools");
  EXPECT_LT(estimateChatTokens(no_tools), full);
  json::object low = bigger;
  low["messages"].as_array()[1].as_object()["content"].as_array()[1].as_object()["image_url"].as_object()["detail"] = "low";
  EXPECT_EQ(estimateChatTokens(low), full - 765 + 85);
}

TEST(TokenEstimator, AnthropicRequestsGrowWithContent) {
  json::object small = json::parse(R"({"model":"m","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]})").as_object();
  const std::int64_t base = estimateAnthropicTokens(small);
  EXPECT_GT(base, 0);

  json::object with_system = small;
  with_system["system"] = "You are a careful assistant who answers briefly.";
  EXPECT_GT(estimateAnthropicTokens(with_system), base);
  json::object with_system_blocks = small;
  with_system_blocks["system"] =
      json::parse(R"([{"type":"text","text":"You are a careful assistant who answers briefly."}])");
  EXPECT_EQ(estimateAnthropicTokens(with_system_blocks), estimateAnthropicTokens(with_system));

  json::object full = json::parse(R"({"model":"m","max_tokens":10,
    "system":"Be brief.",
    "messages":[
      {"role":"user","content":[{"type":"text","text":"Describe this."},
        {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},
      {"role":"assistant","content":[{"type":"text","text":"Let me look it up."},
        {"type":"tool_use","id":"toolu_1","name":"lookup","input":{"query":"cat on sofa"}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1",
        "content":[{"type":"text","text":"A cat sleeping on a red sofa."}]}]}],
    "tools":[{"name":"lookup","description":"Search the web.",
      "input_schema":{"type":"object","properties":{"query":{"type":"string"}}}}]})")
                          .as_object();
  const std::int64_t all = estimateAnthropicTokens(full);
  EXPECT_GT(all, base + 1600 + 346);  // image + tool prompt
  json::object without_result = full;
  without_result["messages"].as_array().pop_back();
  EXPECT_LT(estimateAnthropicTokens(without_result), all);
}

TEST(TokenEstimator, MalformedRequestsAreTolerated) {
  for (std::string_view text :
       {R"({})", R"({"messages":7})", R"({"messages":[1,"x",null,{"role":5,"content":{}}]})",
        R"({"messages":[{"role":"user","content":[1,{"type":7},{"type":"image_url"}]}]})",
        R"({"messages":[{"role":"assistant","tool_calls":[1,{"function":7},{"function":{"arguments":{"a":1}}}]}]})",
        R"({"tools":[1,{"function":null}],"functions":"x","system":7})",
        R"({"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"tool_result","content":"deep"}]}]}]})"}) {
    json::object req = json::parse(text).as_object();
    EXPECT_GE(estimateChatTokens(req), 0) << text;
    EXPECT_GE(estimateAnthropicTokens(req), 0) << text;
  }
}

TEST(TokenEstimator, StreamedTextInEveryClientFormat) {
  const auto& c = defaultTokenCounter();
  const std::string_view text = "Hello there, how are you today?";
  const std::int64_t want = c.count(text);
  // OpenAI chat, Anthropic text and tool deltas, the Responses API: the text counts, the
  // framing (ids, model names, types) does not.
  EXPECT_EQ(estimateStreamedTokens(R"(data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hello there, how are you today?"},"finish_reason":null}]})"
                                   "\n\n", c), want);
  EXPECT_EQ(estimateStreamedTokens(R"(event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello there, how are you today?"}})", c), want);
  EXPECT_EQ(estimateStreamedTokens(R"(data: {"type":"response.output_text.delta","item_id":"msg_1","delta":"Hello there, how are you today?"})", c), want);
  EXPECT_GT(estimateStreamedTokens(R"({"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Paris\"}"}})", c), 3);
  // Two events in one piece count twice; an escaped quote does not end the value.
  EXPECT_EQ(estimateStreamedTokens(R"({"content":"Hello there, how are you today?"}{"content":"Hello there, how are you today?"})", c), 2 * want);
  EXPECT_EQ(estimateStreamedTokens(R"({"content":"say \"hi\" now"})", c), c.count(R"(say \"hi\" now)"));
  // No text at all, or a value cut by the end of the piece (counted up to the cut).
  EXPECT_EQ(estimateStreamedTokens(R"(data: {"choices":[{"delta":{},"finish_reason":"stop"}]})", c), 0);
  EXPECT_EQ(estimateStreamedTokens(R"({"content":"Hello there)", c), c.count("Hello there"));
  EXPECT_EQ(estimateStreamedTokens("", c), 0);
  EXPECT_EQ(estimateStreamedTokens(R"(":")", c), 0);
}

}  // namespace token_estimator_test
}  // namespace tahua
