#include "providers/mock/mock_responses.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace tahua::mock {
namespace mock_responses_test {  // named, not anonymous: eight test files compile as one unit

boost::json::object eventJson(const std::string& frame) {
  EXPECT_EQ(frame.rfind("data: ", 0), 0u);
  EXPECT_EQ(frame.substr(frame.size() - 2), "\n\n");
  return boost::json::parse(frame.substr(6, frame.size() - 8)).as_object();
}


TEST(MockResponses, ChatStreamHasRoleContentFinishUsageDone) {
  MockRequest r;
  r.model = "m";
  r.stream = true;
  r.include_usage = true;
  r.completion_tokens = 3;
  r.prompt_tokens = 5;
  const int n = eventCount(r);
  ASSERT_EQ(n, 7);  // role, 3 tokens, finish, usage, [DONE]
  auto first = eventJson(streamEvent(r, 0));
  EXPECT_EQ(first.at("object").as_string(), "chat.completion.chunk");
  EXPECT_EQ(first.at("choices").as_array()[0].at("delta").at("role").as_string(), "assistant");
  std::string text;
  for (int i = 1; i <= 3; ++i)
    text += eventJson(streamEvent(r, i)).at("choices").as_array()[0].at("delta").at("content").as_string().c_str();
  EXPECT_EQ(text, "Hello from the");
  auto finish = eventJson(streamEvent(r, 4));
  EXPECT_EQ(finish.at("choices").as_array()[0].at("finish_reason").as_string(), "stop");
  EXPECT_TRUE(finish.at("usage").is_null());
  auto usage = eventJson(streamEvent(r, 5));
  EXPECT_TRUE(usage.at("choices").as_array().empty());
  EXPECT_EQ(usage.at("usage").at("total_tokens").as_int64(), 8);
  EXPECT_EQ(streamEvent(r, 6), "data: [DONE]\n\n");
}

TEST(MockResponses, NonStreamingChatAndEmbeddings) {
  MockRequest r;
  r.model = "m";
  r.completion_tokens = 2;
  r.prompt_tokens = 4;
  auto chat = boost::json::parse(fullResponse(r)).as_object();
  EXPECT_EQ(chat.at("object").as_string(), "chat.completion");
  EXPECT_EQ(chat.at("choices").as_array()[0].at("message").at("content").as_string(), "Hello from");
  EXPECT_EQ(chat.at("usage").at("completion_tokens").as_int64(), 2);
  r.endpoint = Endpoint::Embeddings;
  r.embedding_inputs = 2;
  r.embedding_dimensions = 3;
  auto emb = boost::json::parse(fullResponse(r)).as_object();
  ASSERT_EQ(emb.at("data").as_array().size(), 2u);
  EXPECT_EQ(emb.at("data").as_array()[1].at("embedding").as_array().size(), 3u);
}

TEST(MockResponses, Base64EmbeddingsAreLittleEndianFloat32) {
  MockRequest r;
  r.endpoint = Endpoint::Embeddings;
  r.embedding_dimensions = 3;
  r.embedding_base64 = true;
  auto emb = boost::json::parse(fullResponse(r)).as_object();
  // 3 floats = 12 bytes = 16 base64 characters.
  EXPECT_EQ(emb.at("data").as_array()[0].at("embedding").as_string().size(), 16u);
  EXPECT_TRUE(wantsBase64(R"({"input":"x","encoding_format":"base64"})"));
  EXPECT_FALSE(wantsBase64(R"({"input":"x","encoding_format":"float"})"));
  EXPECT_FALSE(wantsBase64(R"({"input":"x"})"));
}

TEST(MockResponses, CountsEmbeddingInputs) {
  EXPECT_EQ(countEmbeddingInputs(R"({"input":"one"})"), 1);
  EXPECT_EQ(countEmbeddingInputs(R"({"input":["a","b","c"]})"), 3);
  EXPECT_EQ(countEmbeddingInputs(R"({"input":[1,2,3]})"), 1);
  EXPECT_EQ(countEmbeddingInputs(R"({"input":[[1],[2]]})"), 2);
  EXPECT_EQ(countEmbeddingInputs("garbage"), 1);
}

}  // namespace mock_responses_test
}  // namespace tahua::mock
