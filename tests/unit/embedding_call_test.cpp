// The embeddings the gateway asks for itself (semantic cache, quality check): the call it
// makes for each provider kind, and what it accepts back (every malformed answer is none).
#include "providers/embedding_call.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "config/config.h"

namespace tahua {
namespace embedding_call_test {  // named, not anonymous: eight test files compile as one unit

OutboundResponse answer(std::string body, int status = 200) {
  OutboundResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

TEST(EmbeddingCall, ReadsVectorsInIndexOrderAndRefusesAnythingElse) {
  auto two = embeddingsOf(answer(R"({"object":"list","data":[{"object":"embedding","index":1,"embedding":[0,1]},)"
                                 R"({"object":"embedding","index":0,"embedding":[1.5,-2e-3]}],"model":"m"})"),
                          2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0], (std::vector<float>{1.5f, -0.002f}));
  EXPECT_EQ(two[1], (std::vector<float>{0, 1}));
  // encoding_format base64: little-endian float32s ([1.0, -2.0] and [0.5, 0.25]).
  auto b64 = embeddingsOf(answer(R"({"data":[{"index":0,"embedding":"AACAPwAAAMA="},{"index":1,"embedding":"AAAAPwAAgD4="}]})"), 2);
  ASSERT_EQ(b64.size(), 2u);
  EXPECT_EQ(b64[0], (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(b64[1], (std::vector<float>{0.5f, 0.25f}));
  EXPECT_TRUE(embeddingsOf(answer(R"({"data":[{"embedding":"AACAPwAA"},{"embedding":"AAAAPwAAgD4="}]})"), 2).empty());  // 6 bytes
  EXPECT_TRUE(embeddingsOf(answer(R"({"data":[{"embedding":"!!!!"},{"embedding":"AAAAPwAAgD4="}]})"), 2).empty());
  // Without indexes: in order.
  EXPECT_EQ(embeddingsOf(answer(R"({"data":[{"embedding":[1]},{"embedding":[2]}]})"), 2)[1], std::vector<float>{2});
  for (const char* bad : {
           R"({"data":[{"embedding":[1,2]}]})",                                    // one vector, two asked for
           R"({"data":[{"embedding":[1,2]},{"embedding":[1]}]})",                  // lengths differ
           R"({"data":[{"embedding":[1,"x"]},{"embedding":[1,2]}]})",              // not a number
           R"({"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[2]}]})",  // an index twice
           R"({"data":[{"index":5,"embedding":[1]},{"embedding":[2]}]})",          // out of range
           R"({"data":[{"embedding":[]},{"embedding":[]}]})",                      // empty
           R"({"data":[{"embedding":[1e400]},{"embedding":[1]}]})",                // not finite
           R"({"data":{}})", R"([1,2])", "not json", R"({"data":[{"embedding":[1]},{"embedding":[2]},{"embedding":[3]}]})"}) {
    EXPECT_TRUE(embeddingsOf(answer(bad), 2).empty()) << bad;
  }
  EXPECT_TRUE(embeddingsOf(answer(R"({"data":[{"embedding":[1]},{"embedding":[2]}]})", 500), 2).empty());
}

TEST(EmbeddingCall, CosineSimilarity) {
  const std::vector<float> a{1, 0}, b{0, 1}, c{2, 0}, zero{0, 0};
  EXPECT_DOUBLE_EQ(cosineSimilarity(a, c), 1.0);
  EXPECT_DOUBLE_EQ(cosineSimilarity(a, b), 0.0);
  EXPECT_DOUBLE_EQ(cosineSimilarity(a, zero), 0.0);
  EXPECT_DOUBLE_EQ(cosineSimilarity(a, std::vector<float>{1, 0, 0}), 0.0);  // lengths differ
}

TEST(EmbeddingCall, TheRequestAndWhoCanEmbed) {
  EXPECT_EQ(embeddingRequestBody("small", {"a", "b"}), R"({"model":"small","encoding_format":"base64","input":["a","b"]})");
  EXPECT_EQ(embeddingRequestBody("small", {"only"}), R"({"model":"small","encoding_format":"base64","input":"only"})");
  auto loaded = loadConfigString(R"(
listeners: [{port: 0}]
providers:
  - {name: oa, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: sk-x}
  - {name: az, type: azure-openai, base_url: "https://res.openai.azure.com/openai", api_version: "2024-06-01", api_key: az-key}
  - {name: an, type: anthropic, api_key: k}
  - {name: mk, type: mock}
models:
  - {name: small, provider: oa, upstream_model: text-embedding-3-small}
  - {name: azure-emb, provider: az, upstream_model: emb-deploy}
  - {name: mock-emb, provider: mk}
  - {name: claude, provider: an}
)",
                                 "t.yaml");
  ASSERT_TRUE(loaded.config) << loaded.error;
  const Config& cfg = *loaded.config;
  EXPECT_TRUE(embeddingModelProblem(cfg, "small").empty());
  EXPECT_TRUE(embeddingModelProblem(cfg, "azure-emb").empty());
  EXPECT_TRUE(embeddingModelProblem(cfg, "mock-emb").empty());
  EXPECT_NE(embeddingModelProblem(cfg, "claude").find("openai, azure-openai or mock"), std::string::npos);
  EXPECT_NE(embeddingModelProblem(cfg, "nope").find("unknown model"), std::string::npos);
}

}  // namespace embedding_call_test
}  // namespace tahua
