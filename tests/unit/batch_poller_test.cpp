#include "batches/batch_poller.h"
#include "request/request_context.h"

#include <gtest/gtest.h>

namespace tahua {
namespace batch_poller_test {  // named, not anonymous: eight test files compile as one unit

TEST(BatchPoller, OutputUsageSumsPerModelAcrossEndpointsAndSkipsWhatIsNotAnAnswer) {
  const std::string jsonl =
      R"({"id":"r1","custom_id":"1","response":{"status_code":200,"body":{"model":"gpt-4o","usage":{"prompt_tokens":10,"completion_tokens":5}}},"error":null})"
      "\n"
      R"({"id":"r2","custom_id":"2","response":{"status_code":200,"body":{"model":"gpt-4o","usage":{"prompt_tokens":7,"completion_tokens":3}}},"error":null})"
      "\r\n\n"
      R"({"id":"r3","custom_id":"3","response":{"status_code":200,"body":{"model":"text-embedding-3-small","usage":{"input_tokens":4}}}})"
      "\n"
      R"({"id":"r4","custom_id":"4","response":null,"error":{"code":"bad","message":"x"}})"
      "\n"
      "not json\n"
      R"({"id":"r5","custom_id":"5","response":{"status_code":500,"body":{"model":"gpt-4o"}}})";
  const auto usage = BatchPoller::outputUsage(jsonl);
  ASSERT_EQ(usage.size(), 2u);
  const BatchUsage& chat = usage.at("gpt-4o");
  EXPECT_EQ(chat.requests, 3);
  EXPECT_EQ(chat.usage.prompt_tokens, 17);
  EXPECT_EQ(chat.usage.completion_tokens, 8);
  EXPECT_EQ(chat.usage.total_tokens, 25);
  const BatchUsage& embed = usage.at("text-embedding-3-small");
  EXPECT_EQ(embed.usage.prompt_tokens, 4);
  EXPECT_EQ(embed.usage.completion_tokens, 0);
}

TEST(BatchPoller, BatchPricesApplyOnlyToBatchUsage) {
  ModelConfig m;
  m.pricing.set = true;
  m.pricing.input = 2;
  m.pricing.output = 8;
  m.pricing.cached_input = 1;
  m.pricing.batch_input = 1;
  m.pricing.batch_output = 4;
  Usage u;
  u.prompt_tokens = 1'000'000;
  u.completion_tokens = 1'000'000;
  EXPECT_DOUBLE_EQ(costUsd(&m, u), 10);
  u.batch = true;
  EXPECT_DOUBLE_EQ(costUsd(&m, u), 5);
  m.pricing.batch_input = m.pricing.batch_output = -1;  // none: the regular prices
  EXPECT_DOUBLE_EQ(costUsd(&m, u), 10);
}

}  // namespace batch_poller_test
}  // namespace tahua
