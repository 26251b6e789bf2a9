#include <gtest/gtest.h>

#include "server/realtime_relay.h"

namespace tahua {
namespace realtime_usage_test {  // named, not anonymous: eight test files compile as one unit

TEST(RealtimeUsage, ResponseDoneEventsAddUpAndOthersAreNotUsage) {
  Usage u;
  EXPECT_FALSE(addRealtimeUsage(R"({"type":"response.output_text.delta","delta":"response.done"})", u));
  EXPECT_FALSE(u.present());
  const std::string done =
      R"({"type":"response.done","event_id":"e","response":{"id":"r","usage":{"total_tokens":150,"input_tokens":100,"output_tokens":50,"input_token_details":{"cached_tokens":20}}}})";
  EXPECT_TRUE(addRealtimeUsage(done, u));
  EXPECT_TRUE(addRealtimeUsage(done, u));
  EXPECT_EQ(u.prompt_tokens, 200);
  EXPECT_EQ(u.completion_tokens, 100);
  EXPECT_EQ(u.cached_tokens, 40);
  EXPECT_EQ(u.total_tokens, 300);
  // A response.done without usage (a cancelled response) is one, and adds nothing.
  EXPECT_TRUE(addRealtimeUsage(R"({"type":"response.done","response":{"id":"r2","status":"cancelled"}})", u));
  EXPECT_EQ(u.total_tokens, 300);
  EXPECT_FALSE(addRealtimeUsage("not json \"response.done\"", u));
}

}  // namespace realtime_usage_test
}  // namespace tahua
