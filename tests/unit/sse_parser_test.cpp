#include "sse/sse_parser.h"

#include "core/json_scan.h"
#include "providers/provider.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tahua {
namespace sse_parser_test {  // named, not anonymous: eight test files compile as one unit

struct SseCollected : SseSink {
  std::vector<std::string> events;  // "event|data|id"
  std::vector<std::string> comments;
  void onEvent(const SseEvent& e) override {
    events.push_back(std::string(e.event) + "|" + std::string(e.data) + "|" + std::string(e.id));
  }
  void onComment(std::string_view c) override { comments.emplace_back(c); }
};

std::vector<std::string> parseWhole(std::string_view input) {
  SseParser p;
  SseCollected c;
  EXPECT_TRUE(p.feed(input, c));
  return c.events;
}

// The property that matters most: any split of the byte stream gives the same events.
void expectSplitInvariant(std::string_view input) {
  const auto expected = parseWhole(input);
  for (std::size_t cut = 0; cut <= input.size(); ++cut) {
    SseParser p;
    SseCollected c;
    p.feed(input.substr(0, cut), c);
    p.feed(input.substr(cut), c);
    ASSERT_EQ(c.events, expected) << "split at byte " << cut;
  }
  // And byte by byte.
  SseParser p;
  SseCollected c;
  for (char ch : input) p.feed(std::string_view(&ch, 1), c);
  ASSERT_EQ(c.events, expected) << "byte by byte";
}


TEST(SseParser, OpenAIChunksAndDone) {
  auto ev = parseWhole("data: {\"a\":1}\n\ndata: [DONE]\n\n");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0], "|{\"a\":1}|");
  EXPECT_EQ(ev[1], "|[DONE]|");
}

TEST(SseParser, NamedEventsMultiLineDataAndIds) {
  auto ev = parseWhole("event: message_start\ndata: line1\ndata: line2\nid: 7\n\n");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0], "message_start|line1\nline2|7");
}

TEST(SseParser, AllLineEndings) {
  EXPECT_EQ(parseWhole("data: a\r\n\r\ndata: b\r\rdata: c\n\n"),
            (std::vector<std::string>{"|a|", "|b|", "|c|"}));
}

TEST(SseParser, CommentsAreNotEvents) {
  SseParser p;
  SseCollected c;
  p.feed(": keep-alive\n\ndata: x\n\n", c);
  EXPECT_EQ(c.events, std::vector<std::string>{"|x|"});
  EXPECT_EQ(c.comments, std::vector<std::string>{"keep-alive"});
}

TEST(SseParser, FieldWithoutSpaceAndWithoutValue) {
  EXPECT_EQ(parseWhole("data:x\n\ndata\n\n"), (std::vector<std::string>{"|x|", "||"}));
}

TEST(SseParser, EventWithoutDataIsNotDispatched) {
  EXPECT_TRUE(parseWhole("event: ping\n\n").empty());
}

TEST(SseParser, UnterminatedEventIsHeldBack) {
  SseParser p;
  SseCollected c;
  p.feed("data: partial", c);
  EXPECT_TRUE(c.events.empty());
  p.feed("\n\n", c);
  EXPECT_EQ(c.events, std::vector<std::string>{"|partial|"});
}

TEST(SseParser, LeadingBomIsSkipped) {
  EXPECT_EQ(parseWhole("\xEF\xBB\xBF" "data: a\n\n"), std::vector<std::string>{"|a|"});
}

TEST(SseParser, SplitInvariantOverEveryBytePosition) {
  expectSplitInvariant(
      "data: {\"choices\":[{\"delta\":{\"content\":\"h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C\"}}]}\r\n\r\n"
      ": comment\r\n"
      "event: content_block_delta\r\ndata: {\"partial_json\":\"{\\\"a\\\":\"}\r\n\r\n"
      "data: one\ndata: two\n\n"
      "data: [DONE]\n\n");
  expectSplitInvariant("\xEF\xBB\xBF" "data: bom\r\rdata: cr\r\r");
}

TEST(SseParser, OversizedLineIsRefusedNotBuffered) {
  SseParser p(16);
  SseCollected c;
  EXPECT_FALSE(p.feed(std::string(64, 'x'), c));
  EXPECT_FALSE(p.feed("\n\n", c));
  p.reset();
  EXPECT_TRUE(p.feed("data: ok\n\n", c));
  EXPECT_EQ(c.events, std::vector<std::string>{"|ok|"});
}

}  // namespace sse_parser_test
}  // namespace tahua

namespace tahua {
namespace sse_parser_test {

TEST(SseParser, CarriageReturnsAnywhereInOneFeed) {
  // A "\r" found once per feed must not hide the "\n" lines before or after it.
  expectSplitInvariant("data: a\n\ndata: b\r\ndata: c\n\rdata: d\r\r: note\ndata: e\n\n");
  EXPECT_EQ(parseWhole("data: a\n\ndata: b\r\ndata: c\n\rdata: d\r\r: note\ndata: e\n\n"),
            (std::vector<std::string>{"|a|", "|b\nc|", "|d|", "|e|"}));
}

TEST(JsonScan, FindsTheLastKeyAndOnlyAKey) {
  const std::string_view chunk =
      R"({"id":"x","choices":[{"delta":{"content":"say \"usage\" twice"},"finish_reason":null}],"usage":null})";
  EXPECT_EQ(findLastKey(chunk, "\"usage\""), chunk.rfind("\"usage\""));
  EXPECT_EQ(findLastKey(chunk, "\"finish_reason\""), chunk.find("\"finish_reason\""));
  EXPECT_EQ(findLastKey(R"({"a":"\"usage\""})", "\"usage\""), std::string_view::npos);  // escaped: text
  EXPECT_EQ(findLastKey(R"({"usage_x":1})", "\"usage\""), std::string_view::npos);
  EXPECT_EQ(findLastKey(R"("usage")", "\"usage\""), 0u);
  EXPECT_EQ(findLastKey("", "\"usage\""), std::string_view::npos);
  EXPECT_EQ(findLastKey("\"usag", "\"usage\""), std::string_view::npos);
  // At the very start and the very end, the letter elsewhere, the key twice.
  EXPECT_EQ(findLastKey(R"("u"usage")", "\"usage\""), 2u);
  EXPECT_EQ(findLastKey(R"({"usage":1,"u":"usage","usage":2})", "\"usage\""), 23u);
  EXPECT_EQ(findLastKey(R"(uuuu"usage"uuuu)", "\"usage\""), 4u);
  EXPECT_EQ(findLastKey(R"(uuuuuuu)", "\"usage\""), std::string_view::npos);
  EXPECT_EQ(findLastKey("x", "\""), std::string_view::npos);  // a key of one character: none
}

TEST(JsonScan, UsageIsReadFromTheLastUsageKey) {
  Usage u;
  EXPECT_FALSE(extractOpenAIUsage(std::string_view(R"({"choices":[],"usage":null})"), u));
  EXPECT_TRUE(extractOpenAIUsage(
      std::string_view(R"({"tools":[{"parameters":{"properties":{"usage":{"type":"string"}}}}],"usage":{"prompt_tokens":3,"completion_tokens":4}})"),
      u));
  EXPECT_EQ(u.prompt_tokens, 3);
  EXPECT_EQ(u.completion_tokens, 4);
}

}  // namespace sse_parser_test
}  // namespace tahua
