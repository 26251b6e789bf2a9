// appendResp writes exactly what hiredis' own formatter writes.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <string>
#include <vector>

#include "store/redis/resp.h"

namespace tahua {

TEST(Resp, SameBytesAsHiredis) {
  const std::string binary("a\0b\r\n", 5);
  const std::string big(70000, 'x');
  const std::vector<std::vector<std::string_view>> cases = {
      {"PING"},
      {"SET", "k", ""},
      {"XADD", "tahua:usage", "MAXLEN", "~", "1000000", "*", "record_id", "0193", "record", "{\"a\":1}"},
      {"EVALSHA", "abc", "2", binary, big},
  };
  for (const auto& args : cases) {
    std::string ours;
    appendResp(ours, args);
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (auto a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    char* cmd = nullptr;
    const int n = redisFormatCommandArgv(&cmd, static_cast<int>(args.size()), argv.data(), lens.data());
    ASSERT_GT(n, 0);
    EXPECT_EQ(ours, std::string(cmd, static_cast<std::size_t>(n)));
    redisFreeCommand(cmd);
  }
}

}  // namespace tahua
