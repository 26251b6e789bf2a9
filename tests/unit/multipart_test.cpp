#include "http/multipart.h"

#include <gtest/gtest.h>

namespace tahua {
namespace multipart_test {  // named, not anonymous: eight test files compile as one unit

const std::string kBody =
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
    "Content-Type: audio/wav\r\n"
    "\r\n"
    "RIFF\r\n--Xy not a delimiter\r\n-"
    "\r\n--XyZ\r\n"
    "Content-Disposition: form-data; name=\"model\"\r\n"
    "\r\n"
    "whisper-1"
    "\r\n--XyZ\r\n"
    "content-disposition: form-data; name=\"prompt\"\r\n"
    "\r\n"
    "say \"hi\"\r\nthere"
    "\r\n--XyZ--\r\n";

void expectParts(const MultipartScanner& s) {
  ASSERT_EQ(s.parts().size(), 3u);
  const FormPart& file = s.parts()[0];
  EXPECT_TRUE(file.file());
  EXPECT_EQ(file.name, "file");
  EXPECT_EQ(file.filename, "a.wav");
  EXPECT_EQ(file.content_type, "audio/wav");
  EXPECT_TRUE(file.value.empty());
  EXPECT_EQ(kBody.substr(file.data_begin, file.data_end - file.data_begin), "RIFF\r\n--Xy not a delimiter\r\n-");
  EXPECT_EQ(kBody.substr(file.head_begin, 21), "Content-Disposition: ");
  EXPECT_EQ(s.parts()[1].name, "model");
  EXPECT_FALSE(s.parts()[1].file());
  EXPECT_EQ(s.parts()[1].value, "whisper-1");
  EXPECT_EQ(s.parts()[2].value, "say \"hi\"\r\nthere");
}

TEST(Multipart, WholeBody) {
  MultipartScanner s("XyZ", {});
  ASSERT_TRUE(s.feed(kBody)) << s.error();
  ASSERT_TRUE(s.finish()) << s.error();
  expectParts(s);
}

TEST(Multipart, EverySplitAndByteByByte) {
  for (std::size_t cut = 0; cut <= kBody.size(); ++cut) {
    MultipartScanner s("XyZ", {});
    ASSERT_TRUE(s.feed(std::string_view(kBody).substr(0, cut))) << cut;
    ASSERT_TRUE(s.feed(std::string_view(kBody).substr(cut))) << cut;
    ASSERT_TRUE(s.finish()) << cut << ": " << s.error();
    expectParts(s);
  }
  MultipartScanner s("XyZ", {});
  for (char c : kBody) ASSERT_TRUE(s.feed(std::string_view(&c, 1)));
  ASSERT_TRUE(s.finish()) << s.error();
  expectParts(s);
}

TEST(Multipart, Boundary) {
  EXPECT_EQ(formBoundary("multipart/form-data; boundary=abc"), "abc");
  EXPECT_EQ(formBoundary("Multipart/Form-Data;boundary=\"a b;c\""), "a b;c");
  EXPECT_EQ(formBoundary("multipart/form-data; charset=utf-8; boundary=----formdata-undici-0"), "----formdata-undici-0");
  EXPECT_FALSE(formBoundary("application/json"));
  EXPECT_FALSE(formBoundary("multipart/form-data"));
  EXPECT_FALSE(formBoundary("multipart/form-data; boundary="));
  EXPECT_FALSE(formBoundary("multipart/form-data; boundary=" + std::string(71, 'a')));
}

TEST(Multipart, Refusals) {
  {
    MultipartScanner s("XyZ", {});
    EXPECT_TRUE(s.feed(kBody.substr(0, kBody.size() - 12)));
    EXPECT_FALSE(s.finish());
    EXPECT_NE(s.error().find("closing boundary"), std::string::npos);
  }
  {
    MultipartScanner::Limits limits;
    limits.max_text_bytes = 12;
    MultipartScanner s("XyZ", limits);
    EXPECT_FALSE(s.feed(kBody));
    EXPECT_NE(s.error().find("text fields"), std::string::npos);
  }
  {
    MultipartScanner::Limits limits;
    limits.max_parts = 2;
    MultipartScanner s("XyZ", limits);
    EXPECT_FALSE(s.feed(kBody));
  }
  {
    MultipartScanner s("b", {});
    EXPECT_FALSE(s.feed("--b\r\nX-Nothing: 1\r\n\r\nv\r\n--b--"));
    EXPECT_NE(s.error().find("Content-Disposition"), std::string::npos);
  }
  {
    MultipartScanner s("b", {});
    EXPECT_FALSE(s.feed("--b\r\n" + std::string(9000, 'h')));
  }
  {
    MultipartScanner s("b", {});
    EXPECT_FALSE(s.feed("--bxx\r\n"));
  }
}

TEST(Multipart, PreambleAndEpilogueIgnored) {
  MultipartScanner s("b", {});
  ASSERT_TRUE(s.feed("ignored preamble\r\n--b\r\nContent-Disposition: form-data; name=m\r\n\r\nv\r\n--b--\r\ntrailing"));
  ASSERT_TRUE(s.finish());
  ASSERT_EQ(s.parts().size(), 1u);
  EXPECT_EQ(s.parts()[0].name, "m");
  EXPECT_EQ(s.parts()[0].value, "v");
}

}  // namespace multipart_test
}  // namespace tahua
