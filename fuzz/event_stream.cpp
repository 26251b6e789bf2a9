// The AWS event-stream decoder (src/aws/event_stream.h) reading Bedrock's streams.
//
// Input: a control byte, a 16-bit split choice, then the stream bytes.
// - Control bit 0: the target rewrites both CRCs of every message in place first, so the
//   fuzzer gets past the checksums into the header parser (it cannot forge CRC32s fast).
// - Control bit 1: a small max_message_bytes (16..143) instead of the default.
// Checked beyond "no crash": the decoder promises the same messages for any split, so the
// stream is decoded whole and cut at two fuzzer-chosen points, and messages, error and
// end state must match; and every decoded message, encoded again with
// encodeEventStreamMessage, must give back exactly the bytes it was decoded from.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aws/event_stream.h"
#include "event_stream_crc.h"
#include "fuzz_input.h"

namespace {

using tahua::EventStreamDecoder;
using tahua::EventStreamMessage;

struct Outcome {
  std::vector<std::string> encoded;  // each message re-encoded
  std::optional<std::string> error;
  bool mid_message = false;
  std::uint64_t decoded = 0;
};

Outcome decode(const std::vector<std::string_view>& pieces, std::size_t max_message_bytes) {
  Outcome out;
  EventStreamDecoder decoder(max_message_bytes);
  const EventStreamDecoder::Handler handler = [&](const EventStreamMessage& m) -> std::optional<tahua::Error> {
    auto bytes = tahua::encodeEventStreamMessage(m.headers, m.payload);
    FUZZ_CHECK(std::holds_alternative<std::string>(bytes));
    out.encoded.push_back(std::move(std::get<std::string>(bytes)));
    return std::nullopt;
  };
  for (const auto piece : pieces) {
    // A heap copy per feed: bytes the decoder kept a view of would be freed here.
    const std::string copy(piece);
    if (auto err = decoder.feed(copy, handler)) {
      out.error = err->message;
      FUZZ_CHECK(decoder.failed());
      break;
    }
  }
  out.mid_message = decoder.midMessage();
  out.decoded = decoder.messagesDecoded();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tahua;
  fuzz::Input in(data, size);
  const std::uint8_t control = in.byte();
  const std::uint16_t split = in.u16();
  std::string stream(in.rest());
  if (control & 1) fuzz::fixEventStreamCrcs(stream);
  const std::size_t max_bytes = control & 2 ? 16 + (control >> 2) * 4 : kEventStreamDefaultMaxMessageBytes;
  const std::string_view s = stream;
  const std::size_t a = fuzz::splitPoint(split, s.size());
  const std::size_t b = a + fuzz::splitPoint(split >> 4, s.size() - a);

  const Outcome whole = decode({s}, max_bytes);
  const Outcome parts = decode({s.substr(0, a), s.substr(a, b - a), s.substr(b)}, max_bytes);
  FUZZ_CHECK(whole.encoded == parts.encoded);
  FUZZ_CHECK(whole.error == parts.error);
  FUZZ_CHECK(whole.decoded == parts.decoded && whole.decoded == whole.encoded.size());
  if (!whole.error) FUZZ_CHECK(whole.mid_message == parts.mid_message);

  // Messages are decoded in order from the start: re-encoded, they are the input's prefix.
  std::size_t at = 0;
  for (const auto& m : whole.encoded) {
    FUZZ_CHECK(s.substr(at, m.size()) == m);
    at += m.size();
  }
  if (!whole.error) FUZZ_CHECK(whole.mid_message == (at < s.size()));
  return 0;
}
