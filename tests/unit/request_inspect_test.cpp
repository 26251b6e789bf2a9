#include "http/request_inspect.h"

#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

#include "core/json_read.h"
#include "providers/provider.h"

namespace tahua {
namespace request_inspect_test {  // named, not anonymous: eight test files compile as one unit

RequestFacts inspectOk(std::string body) {
  auto r = inspectRequest(body);
  EXPECT_TRUE(std::holds_alternative<RequestFacts>(r)) << body;
  return std::holds_alternative<RequestFacts>(r) ? std::get<RequestFacts>(r) : RequestFacts{};
}

ErrorKind inspectErr(std::string body) {
  auto r = inspectRequest(body);
  EXPECT_TRUE(std::holds_alternative<Error>(r)) << body;
  return std::holds_alternative<Error>(r) ? std::get<Error>(r).kind : ErrorKind::Internal;
}


TEST(RequestInspect, ReadsModelStreamAndIncludeUsage) {
  auto f = inspectOk(R"({"messages":[{"role":"user","content":"hi"}],"model":"gpt-4o","stream":true,)"
                     R"("stream_options":{"include_usage":true}})");
  EXPECT_EQ(f.model, "gpt-4o");
  EXPECT_TRUE(f.stream);
  EXPECT_TRUE(f.include_usage);
}

TEST(RequestInspect, DefaultsWhenAbsent) {
  auto f = inspectOk(R"({"model":"m"})");
  EXPECT_FALSE(f.stream);
  EXPECT_FALSE(f.include_usage);
  EXPECT_FALSE(inspectOk(R"({"model":"m","stream":null})").stream);
}

TEST(RequestInspect, ReadsNAndCountsAnImagesAnswer) {
  EXPECT_EQ(inspectOk(R"({"model":"dall-e-3","prompt":"a cat","n":3})").n, 3);
  EXPECT_EQ(inspectOk(R"({"model":"m","n":-2})").n, 0);  // the upstream judges it
  EXPECT_EQ(inspectOk(R"({"model":"m"})").n, 0);
  std::string answer = R"({"created":1,"data":[{"url":"https://x/1.png"},{"b64_json":"aGk="}]})";
  EXPECT_EQ(topLevelArraySize(answer, "data"), 2);
  std::string none = R"({"created":1})";
  EXPECT_EQ(topLevelArraySize(none, "data"), -1);
  std::string broken = R"({"data":[{"url":)";
  EXPECT_EQ(topLevelArraySize(broken, "data"), -1);
}

TEST(RequestInspect, UnescapesTheModelName) {
  EXPECT_EQ(inspectOk(R"({"model":"a\/b\u00e9"})").model, "a/b\xC3\xA9");
}

TEST(RequestInspect, ErrorsForBadBodies) {
  EXPECT_EQ(inspectErr("not json"), ErrorKind::InvalidJson);
  EXPECT_EQ(inspectErr(""), ErrorKind::InvalidJson);
  EXPECT_EQ(inspectErr(R"({"model":"m",)"), ErrorKind::InvalidJson);
  EXPECT_EQ(inspectErr(R"({"model":"m"} trailing)"), ErrorKind::InvalidJson);
  EXPECT_EQ(inspectErr(R"([1,2])"), ErrorKind::InvalidJson);
  EXPECT_EQ(inspectErr(R"({"messages":[]})"), ErrorKind::MissingModel);
  EXPECT_EQ(inspectErr(R"({"model":""})"), ErrorKind::MissingModel);
  EXPECT_EQ(inspectErr(R"({"model":42})"), ErrorKind::InvalidRequest);
  EXPECT_EQ(inspectErr(R"({"model":"m","stream":"yes"})"), ErrorKind::InvalidRequest);
}

TEST(RequestInspect, RewriteChangesOnlyTheModelToken) {
  std::string body = R"({ "model" : "public-name" , "messages":[{"content":"model \"x\""}]})";
  auto r = inspectRequest(body);
  ASSERT_TRUE(std::holds_alternative<RequestFacts>(r));
  rewriteModel(body, std::get<RequestFacts>(r), "up\"stream");
  EXPECT_EQ(body, R"({ "model" : "up\"stream" , "messages":[{"content":"model \"x\""}]})");
}

TEST(Usage, ExtractedFromChunkAndBody) {
  Usage u;
  EXPECT_TRUE(extractOpenAIUsage(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}})", u));
  EXPECT_EQ(u.prompt_tokens, 3);
  EXPECT_EQ(u.completion_tokens, 5);
  EXPECT_EQ(u.total_tokens, 8);
  Usage none;
  EXPECT_FALSE(extractOpenAIUsage(R"({"choices":[{"delta":{}}],"usage":null})", none));
  EXPECT_FALSE(extractOpenAIUsage(R"({"choices":[]})", none));
  EXPECT_FALSE(none.present());
  std::string owned = R"({"usage":{"prompt_tokens":1,"completion_tokens":2}})";
  Usage padded;
  EXPECT_TRUE(extractOpenAIUsage(owned, padded));  // the in-place padding overload
  EXPECT_EQ(padded.total_tokens, 3);
  EXPECT_EQ(owned, R"({"usage":{"prompt_tokens":1,"completion_tokens":2}})");
  Usage embed;
  EXPECT_TRUE(extractOpenAIUsage(R"({"object":"list","usage":{"prompt_tokens":4,"total_tokens":4}})", embed));
  EXPECT_EQ(embed.total_tokens, 4);
}

// A whole body's usage is read from its last "usage" key when that is the top-level one
// (only that object parsed); every other shape falls back to a whole parse, which reads
// the top-level "usage" whatever follows it.
TEST(Usage, WholeBodyReadsTheTopLevelUsageWhateverFollowsIt) {
  const auto prompt = [](std::string body) {
    Usage u;
    return extractOpenAIUsage(body, u) ? u.prompt_tokens : -1;
  };
  // Responses: strings with braces and escaped quotes after it, an empty metadata object.
  EXPECT_EQ(prompt(R"({"output":[],"usage":{"input_tokens":7,"output_tokens":1,"input_tokens_details":{"cached_tokens":2}},)"
                   R"("user":"a}\"{","metadata":{} } )"),
            7);
  // A deeper "usage" after the top-level one (a tool's schema, a metadata echo): not it.
  EXPECT_EQ(prompt(R"({"usage":{"prompt_tokens":1},"tools":[{"parameters":{"usage":{"prompt_tokens":99}}}]})"), 1);
  EXPECT_EQ(prompt(R"({"usage":{"prompt_tokens":2},"meta":{"usage":{"prompt_tokens":99}}})"), 2);
  // A string value "usage" last, and a string that looks like a key inside a value.
  EXPECT_EQ(prompt(R"({"usage":{"prompt_tokens":3},"kind":"usage"})"), 3);
  EXPECT_EQ(prompt(R"({"usage":{"prompt_tokens":4,"note":"\"usage\":{\"prompt_tokens\":98}"}})"), 4);
  // Nested only: no top-level usage at all.
  EXPECT_EQ(prompt(R"({"choices":[{"usage":{"prompt_tokens":97}}]})"), -1);
  // null, absent, and a body cut inside the usage object.
  EXPECT_EQ(prompt(R"({"choices":[],"usage" : null})"), -1);
  EXPECT_EQ(prompt(R"({"choices":[]})"), -1);
  EXPECT_EQ(prompt(R"({"choices":[],"usage":{"prompt_tokens":5)"), -1);
  // Counts that are not integers, and an escaped key: the whole parse decides (as before,
  // a count that is not an integer is not a count).
  EXPECT_EQ(prompt(R"({"usage":{"prompt_tokens":1.5,"completion_tokens":2}})"), -1);
  EXPECT_EQ(prompt(R"({"usage":{"prompt_tokens":1e3}})"), -1);
  EXPECT_EQ(prompt(R"({"usage":{"prompt_tokens":99999999999999999999}})"), -1);
  EXPECT_EQ(prompt(R"({"usage":{"prompt\u005ftokens":8}})"), 8);
  EXPECT_EQ(prompt(R"({"usage":{"prompt_tokens":-3,"completion_tokens":2}})"), -1);
  {
    std::string body = R"({"usage":{"input_tokens":9,"output_tokens":4,"input_tokens_details":{"cached_tokens":5},)"
                       R"("output_tokens_details":{"cached_tokens":77,"reasoning_tokens":1}}})";
    Usage u;
    ASSERT_TRUE(extractOpenAIUsage(body, u));
    EXPECT_EQ(u.prompt_tokens, 9);
    EXPECT_EQ(u.completion_tokens, 4);
    EXPECT_EQ(u.total_tokens, 13);
    EXPECT_EQ(u.cached_tokens, 5);  // the input's cached tokens, not another object's
  }
  // Whitespace around the key and after the document.
  EXPECT_EQ(prompt("{\"choices\":[] ,\n \"usage\" :\n {\"prompt_tokens\": 6}\n}\n"), 6);
}

TEST(RequestInspect, NestingDepthIsBounded) {
  EXPECT_FALSE(jsonDeeperThan(R"({"a":[[{"b":1}]]})", 4));
  EXPECT_TRUE(jsonDeeperThan(R"({"a":[[{"b":1}]]})", 3));
  // Brackets inside strings, escaped quotes included, do not count.
  EXPECT_FALSE(jsonDeeperThan(R"({"s":"[[[[{{{{\"[[[[","t":"\\"})", 1));
  std::string deep = R"({"model":"m","x":)" + std::string(200, '[') + std::string(200, ']') + "}";
  auto r = inspectRequest(deep, 128);
  ASSERT_TRUE(std::holds_alternative<Error>(r));
  EXPECT_EQ(std::get<Error>(r).kind, ErrorKind::InvalidJson);
  std::string ok = R"({"model":"m","x":)" + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_TRUE(std::holds_alternative<RequestFacts>(inspectRequest(ok, 128)));
}

// Every reader takes what the router lets in (server.max_json_depth goes up to 1,000),
// plus the levels a stored record wraps around it; Boost.JSON's default stops at 32.
TEST(RequestInspect, ReadersTakeDocumentsAsDeepAsTheRouterLetsIn) {
  const auto nested = [](std::size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  boost::system::error_code ec;
  readJson(nested(40), ec);
  EXPECT_FALSE(ec) << ec.message();
  readJson(nested(kJsonReadDepth), ec);
  EXPECT_FALSE(ec) << ec.message();
  readJson(nested(kJsonReadDepth + 1), ec);
  EXPECT_TRUE(ec);  // bounded all the same
  boost::json::parse(nested(40), ec);
  EXPECT_TRUE(ec) << "Boost.JSON's default went past 32 levels: the reason for readJson is gone";
}

}  // namespace request_inspect_test
}  // namespace tahua
