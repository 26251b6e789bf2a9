#include "aws/event_stream.h"

#include <gtest/gtest.h>

#include <boost/crc.hpp>

#include <string>
#include <vector>

namespace tahua {
namespace event_stream_test {  // named, not anonymous: eight test files compile as one unit

using namespace std::literals;

std::string bytesOf(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(static_cast<char>(b));
  return s;
}

// Known-answer vectors from the AWS CRT's event-stream tests (aws-c-event-stream).
const std::string kNoHeaders = bytesOf({0x00, 0x00, 0x00, 0x1D, 0x00, 0x00, 0x00, 0x00, 0xfd, 0x52, 0x8c, 0x5a,
                                        0x7b, 0x27, 0x66, 0x6f, 0x6f, 0x27, 0x3a, 0x27, 0x62, 0x61, 0x72, 0x27,
                                        0x7d, 0xc3, 0x65, 0x39, 0x36});
const std::string kOneHeader = bytesOf({0x00, 0x00, 0x00, 0x3D, 0x00, 0x00, 0x00, 0x20, 0x07, 0xFD, 0x83, 0x96, 0x0C}) +
                               "content-type" + bytesOf({0x07, 0x00, 0x10}) + "application/json" + "{'foo':'bar'}" +
                               bytesOf({0x8D, 0x9C, 0x08, 0xB1});

std::string encode(const std::vector<EventStreamHeader>& headers, std::string_view payload) {
  auto out = encodeEventStreamMessage(headers, payload);
  if (auto* e = std::get_if<Error>(&out)) {
    ADD_FAILURE() << e->message;
    return {};
  }
  return std::get<std::string>(std::move(out));
}

// A message rendered as text so whole sequences compare with one EXPECT_EQ.
std::string describe(const EventStreamMessage& m) {
  std::string s;
  for (const auto& h : m.headers) {
    s += h.name + "(" + std::to_string(static_cast<int>(h.type)) + ")=" + h.bytes + "#" + std::to_string(h.number) + ";";
  }
  return s + "|" + m.payload;
}

struct Result {
  std::vector<std::string> messages;
  std::optional<Error> error;
};

Result decodeChunks(const std::vector<std::string_view>& chunks, std::size_t max = kEventStreamDefaultMaxMessageBytes) {
  EventStreamDecoder d(max);
  Result r;
  for (auto c : chunks) {
    r.error = d.feed(c, [&](const EventStreamMessage& m) -> std::optional<Error> {
      r.messages.push_back(describe(m));
      return std::nullopt;
    });
    if (r.error) break;
  }
  return r;
}

Result decodeAll(std::string_view bytes, std::size_t max = kEventStreamDefaultMaxMessageBytes) {
  return decodeChunks({bytes}, max);
}

std::vector<EventStreamHeader> allHeaderTypes() {
  std::vector<EventStreamHeader> h;
  h.push_back({"true", EventStreamHeaderType::BoolTrue, "", 1});
  h.push_back({"false", EventStreamHeaderType::BoolFalse, "", 0});
  h.push_back({"byte", EventStreamHeaderType::Byte, "", -50});
  h.push_back({"short", EventStreamHeaderType::Short, "", 20000});
  h.push_back({"int", EventStreamHeaderType::Integer, "", -500000});
  h.push_back({"long", EventStreamHeaderType::Long, "", 50000000000});
  h.push_back({"bytes", EventStreamHeaderType::ByteArray, std::string("some\0bytes", 10), 0});
  h.push_back(EventStreamHeader::string("str", "some str"));
  h.push_back({"time", EventStreamHeaderType::Timestamp, "", 5000000000});
  h.push_back({"uuid", EventStreamHeaderType::Uuid, "0123456789abcdef", 0});
  return h;
}

std::string fixture() {
  std::string s;
  s += encode({EventStreamHeader::string(":event-type", "messageStart"), EventStreamHeader::string(":message-type", "event")},
              R"({"role":"assistant"})");
  s += encode(allHeaderTypes(), "some payload");
  s += encode({}, "");
  s += encode({EventStreamHeader::string(":event-type", "contentBlockDelta")}, std::string(3000, 'x'));
  s += kNoHeaders;
  s += kOneHeader;
  return s;
}

TEST(EventStream, KnownVectorsEncodeAndDecode) {
  EXPECT_EQ(encode({}, "{'foo':'bar'}"), kNoHeaders);
  EXPECT_EQ(encode({EventStreamHeader::string("content-type", "application/json")}, "{'foo':'bar'}"), kOneHeader);
  auto r = decodeAll(kNoHeaders + kOneHeader);
  ASSERT_FALSE(r.error);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0], "|{'foo':'bar'}");
  EXPECT_EQ(r.messages[1], "content-type(7)=application/json#0;|{'foo':'bar'}");
}

TEST(EventStream, RoundTripAllHeaderTypes) {
  const auto headers = allHeaderTypes();
  const std::string bytes = encode(headers, "some payload");
  EventStreamDecoder d;
  std::vector<EventStreamMessage> got;
  ASSERT_FALSE(d.feed(bytes, [&](const EventStreamMessage& m) -> std::optional<Error> {
    got.push_back(m);
    return std::nullopt;
  }));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].headers.size(), headers.size());
  for (std::size_t i = 0; i < headers.size(); ++i) {
    EXPECT_EQ(got[0].headers[i].name, headers[i].name);
    EXPECT_EQ(got[0].headers[i].type, headers[i].type);
    EXPECT_EQ(got[0].headers[i].bytes, headers[i].bytes);
    EXPECT_EQ(got[0].headers[i].number, headers[i].number) << headers[i].name;
  }
  EXPECT_EQ(got[0].payload, "some payload");
  ASSERT_NE(got[0].stringHeader("str"), nullptr);
  EXPECT_EQ(*got[0].stringHeader("str"), "some str");
  EXPECT_EQ(got[0].stringHeader("bytes"), nullptr);  // not a string
  EXPECT_EQ(got[0].stringHeader("missing"), nullptr);
  EXPECT_FALSE(d.midMessage());
  EXPECT_EQ(d.messagesDecoded(), 1u);
}

TEST(EventStream, AnySplitGivesTheSameMessages) {
  const std::string bytes = fixture();
  const auto whole = decodeAll(bytes);
  ASSERT_FALSE(whole.error);
  ASSERT_EQ(whole.messages.size(), 6u);
  const std::string_view v(bytes);
  for (std::size_t cut = 0; cut <= bytes.size(); ++cut) {
    const auto r = decodeChunks({v.substr(0, cut), v.substr(cut)});
    ASSERT_FALSE(r.error) << "split at " << cut;
    ASSERT_EQ(r.messages, whole.messages) << "split at " << cut;
  }
  // Two cuts, a coarse grid of them.
  for (std::size_t a = 0; a <= bytes.size(); a += 31)
    for (std::size_t b = a; b <= bytes.size(); b += 37) {
      const auto r = decodeChunks({v.substr(0, a), v.substr(a, b - a), v.substr(b)});
      ASSERT_EQ(r.messages, whole.messages) << "splits at " << a << "," << b;
    }
  std::vector<std::string_view> bytewise;
  for (std::size_t i = 0; i < bytes.size(); ++i) bytewise.push_back(v.substr(i, 1));
  const auto r = decodeChunks(bytewise);
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.messages, whole.messages);
}

TEST(EventStream, MidMessageIsReported) {
  const std::string bytes = encode({EventStreamHeader::string("a", "b")}, "payload");
  EventStreamDecoder d;
  auto ignore = [](const EventStreamMessage&) -> std::optional<Error> { return std::nullopt; };
  EXPECT_FALSE(d.feed(std::string_view(bytes).substr(0, 5), ignore));
  EXPECT_TRUE(d.midMessage());
  EXPECT_FALSE(d.feed(std::string_view(bytes).substr(5), ignore));
  EXPECT_FALSE(d.midMessage());
}

void expectError(const std::string& bytes, std::string_view what, std::size_t max = kEventStreamDefaultMaxMessageBytes) {
  // Whole and byte by byte: the same error, never a crash, and the decoder stays failed.
  for (bool bytewise : {false, true}) {
    EventStreamDecoder d(max);
    std::optional<Error> err;
    auto ignore = [](const EventStreamMessage&) -> std::optional<Error> { return std::nullopt; };
    if (bytewise) {
      for (std::size_t i = 0; i < bytes.size() && !err; ++i) err = d.feed(std::string_view(bytes).substr(i, 1), ignore);
    } else {
      err = d.feed(bytes, ignore);
    }
    ASSERT_TRUE(err.has_value()) << what;
    EXPECT_EQ(err->kind, ErrorKind::UpstreamBadResponse);
    EXPECT_NE(err->message.find(what), std::string::npos) << err->message;
    EXPECT_TRUE(d.failed());
    const auto again = d.feed(kNoHeaders, ignore);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->message, err->message);
  }
}

std::string withByte(std::string s, std::size_t at, unsigned char xor_mask) {
  s[at] = static_cast<char>(static_cast<unsigned char>(s[at]) ^ xor_mask);
  return s;
}

// A prelude with a valid CRC over the given lengths (so the length checks are reached).
std::string prelude(std::uint32_t total, std::uint32_t headers) {
  std::string p;
  for (int i = 3; i >= 0; --i) p.push_back(static_cast<char>((total >> (i * 8)) & 0xFF));
  for (int i = 3; i >= 0; --i) p.push_back(static_cast<char>((headers >> (i * 8)) & 0xFF));
  boost::crc_32_type crc;
  crc.process_bytes(p.data(), p.size());
  const std::uint32_t c = crc.checksum();
  for (int i = 3; i >= 0; --i) p.push_back(static_cast<char>((c >> (i * 8)) & 0xFF));
  return p;
}

// A full message with valid CRCs around an arbitrary header block.
std::string rawMessage(std::string_view header_block, std::string_view payload) {
  const auto total = static_cast<std::uint32_t>(12 + header_block.size() + payload.size() + 4);
  std::string m = prelude(total, static_cast<std::uint32_t>(header_block.size()));
  m += header_block;
  m += payload;
  boost::crc_32_type crc;
  crc.process_bytes(m.data(), m.size());
  const std::uint32_t c = crc.checksum();
  for (int i = 3; i >= 0; --i) m.push_back(static_cast<char>((c >> (i * 8)) & 0xFF));
  return m;
}

TEST(EventStream, CorruptionIsReportedPrecisely) {
  const std::string good = encode({EventStreamHeader::string(":event-type", "x")}, "payload");
  expectError(withByte(good, 9, 0x01), "prelude CRC mismatch");
  expectError(withByte(good, 2, 0x01), "prelude CRC mismatch");        // length bit flip
  expectError(withByte(good, good.size() - 2, 0x40), "message CRC mismatch");
  expectError(withByte(good, 20, 0x01), "message CRC mismatch");       // header byte
  expectError(withByte(good, good.size() - 6, 0x01), "message CRC mismatch");  // payload byte
  // After a good message the offset points at the bad one.
  expectError(kNoHeaders + withByte(good, 9, 0x01), "at byte 29:");
}

TEST(EventStream, AbsurdLengthsAreRejected) {
  expectError(prelude(0xFFFFFFFF, 0) + std::string(100, 'x'), "exceeds the limit");
  expectError(prelude(15, 0) + "xxxx", "below the 16-byte minimum");
  expectError(prelude(0, 0), "below the 16-byte minimum");
  expectError(prelude(100, 90) + std::string(100, 'x'), "does not fit");
  expectError(prelude(300000, 200000), "exceeds 128 KiB");
  // Over a small configured bound, before the bytes even arrive.
  const std::string big = encode({}, std::string(2000, 'p'));
  expectError(big, "exceeds the limit of 1024 bytes", 1024);
  EXPECT_FALSE(decodeAll(big, 4096).error);
}

TEST(EventStream, MalformedHeadersAreRejected) {
  expectError(rawMessage(std::string("\x00", 1), ""), "empty name");
  expectError(rawMessage("\x05" "ab"sv, ""), "runs past the header block");
  expectError(rawMessage("\x02" "ab"sv, ""), "runs past the header block");  // no type byte
  expectError(rawMessage("\x02" "ab\x0A"sv, ""), "unknown value type 10");
  expectError(rawMessage("\x02" "ab\x07\x00\x09xyz"sv, ""), "header 'ab' runs past");
  expectError(rawMessage("\x02" "ab\x07\x00"sv, ""), "header 'ab' runs past");
  expectError(rawMessage("\x02" "ab\x04\x00\x00"sv, ""), "header 'ab' runs past");
  expectError(rawMessage("\x02" "ab\x09" "0123456789"sv, ""), "header 'ab' runs past");
}

// The error message quotes the header name, and it reaches the client inside a JSON
// error event: raw bytes there (not UTF-8, control characters) would make that JSON invalid.
TEST(EventStream, HeaderNamesInErrorsArePrintable) {
  expectError(rawMessage("\x04" "a\xFF\n\\\xFF"sv, ""), "header 'a\\xff\\x0a\\x5c' has unknown value type 255");
}

TEST(EventStream, HandlerErrorStopsDecoding) {
  const std::string bytes = fixture();
  EventStreamDecoder d;
  int seen = 0;
  auto err = d.feed(bytes, [&](const EventStreamMessage&) -> std::optional<Error> {
    if (++seen == 2) return Error{ErrorKind::UpstreamInterrupted, "stop"};
    return std::nullopt;
  });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->message, "stop");
  EXPECT_EQ(seen, 2);
  EXPECT_TRUE(d.failed());
}

TEST(EventStream, EncoderRejectsWhatTheFormatCannotHold) {
  EXPECT_TRUE(std::holds_alternative<Error>(encodeEventStreamMessage(
      std::vector<EventStreamHeader>{EventStreamHeader::string(std::string(256, 'n'), "v")}, "")));
  EXPECT_TRUE(std::holds_alternative<Error>(
      encodeEventStreamMessage(std::vector<EventStreamHeader>{EventStreamHeader::string("", "v")}, "")));
  EXPECT_TRUE(std::holds_alternative<Error>(encodeEventStreamMessage(
      std::vector<EventStreamHeader>{EventStreamHeader::string("n", std::string(70000, 'v'))}, "")));
  EXPECT_TRUE(std::holds_alternative<Error>(encodeEventStreamMessage(
      std::vector<EventStreamHeader>{{"u", EventStreamHeaderType::Uuid, "short", 0}}, "")));
}

// Pseudo-random garbage and random corruptions of a valid stream: errors, never crashes.
TEST(EventStream, FuzzNeverCrashes) {
  const std::string good = fixture();
  std::uint64_t x = 88172645463325252ull;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (int round = 0; round < 300; ++round) {
    std::string s = good;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int i = 0; i < flips; ++i) s[next() % s.size()] = static_cast<char>(next());
    EventStreamDecoder d(64 * 1024);
    std::size_t pos = 0;
    while (pos < s.size()) {
      const std::size_t n = 1 + next() % 97;
      if (d.feed(std::string_view(s).substr(pos, n), [](const EventStreamMessage&) -> std::optional<Error> {
            return std::nullopt;
          }))
        break;
      pos += n;
    }
  }
  for (int round = 0; round < 100; ++round) {
    std::string s(1 + next() % 400, '\0');
    for (char& c : s) c = static_cast<char>(next());
    EventStreamDecoder d(1 << 20);
    (void)d.feed(s, [](const EventStreamMessage&) -> std::optional<Error> { return std::nullopt; });
  }
}

}  // namespace event_stream_test
}  // namespace tahua
