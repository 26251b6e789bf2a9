#include "server/http_head.h"

#include <gtest/gtest.h>

namespace tahua {

TEST(HeadWriter, ResponseHead) {
  std::string out = "stale bytes are cleared";
  HeadWriter h(out);
  h.statusLine(404);
  h.header("Content-Type", "application/json");
  h.contentLength(12);
  h.end();
  EXPECT_EQ(out, "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n");
}

TEST(HeadWriter, RequestHeadAndUnknownStatus) {
  std::string out;
  HeadWriter h(out);
  h.requestLine("POST", "/v1/chat/completions");
  h.end();
  EXPECT_EQ(out, "POST /v1/chat/completions HTTP/1.1\r\n\r\n");
  HeadWriter s(out);
  s.statusLine(499);  // not a registered status: still a well-formed status line
  EXPECT_EQ(out.rfind("HTTP/1.1 499 ", 0), 0u);
  EXPECT_EQ(out.substr(out.size() - 2), "\r\n");
}

TEST(ChunkSizeLine, HexWithCrlf) {
  char buf[20];
  EXPECT_EQ(chunkSizeLine(0, buf), "0\r\n");
  EXPECT_EQ(chunkSizeLine(255, buf), "ff\r\n");
  EXPECT_EQ(chunkSizeLine(4096, buf), "1000\r\n");
}

}  // namespace tahua
