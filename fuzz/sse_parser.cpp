// The SSE parser (src/sse/sse_parser.h) that observes every upstream stream.
//
// Input: a control byte, a 16-bit split choice, then the stream bytes.
// The parser promises that any split of the stream gives the same events, so the stream
// is parsed whole and again cut at two fuzzer-chosen points, and the events, comments
// and end state must be identical. With the control byte's low bit set the size bound is
// tiny instead (the overflow path), and only "no crash, false once over" is checked.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_input.h"
#include "sse/sse_parser.h"

namespace {

struct Recorder : tahua::SseSink {
  // Events and comments flattened into one log, since their order matters too.
  std::vector<std::string> log;
  void onEvent(const tahua::SseEvent& e) override {
    std::string entry("E");
    entry.append(e.event).append("\x1f").append(e.data).append("\x1f").append(e.id);
    log.push_back(std::move(entry));
  }
  void onComment(std::string_view c) override { log.push_back(std::string("C").append(c)); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tahua;
  fuzz::Input in(data, size);
  const std::uint8_t control = in.byte();
  const std::uint16_t split = in.u16();
  const std::string_view stream = in.rest();
  const std::size_t a = fuzz::splitPoint(split, stream.size());
  const std::size_t b = a + fuzz::splitPoint(split >> 4, stream.size() - a);

  if (control & 1) {
    SseParser parser(control >> 1);  // 0..127 bytes
    Recorder sink;
    const bool ok1 = parser.feed(stream.substr(0, a), sink);
    const bool ok2 = parser.feed(stream.substr(a), sink);
    FUZZ_CHECK(ok1 || !ok2);  // once over the bound, the parser stays failed
    parser.reset();
    parser.feed(stream, sink);
    return 0;
  }

  // Each piece is its own heap copy: a view kept into a previous feed's bytes (the
  // parser's zero-copy path) is then a use after free ASan reports.
  Recorder whole_sink;
  SseParser whole;
  {
    const std::string copy(stream);
    FUZZ_CHECK(whole.feed(copy, whole_sink));
  }
  Recorder split_sink;
  SseParser parts;
  for (const auto& [from, to] : {std::pair{std::size_t{0}, a}, std::pair{a, b}, std::pair{b, stream.size()}}) {
    const std::string piece(stream.substr(from, to - from));
    FUZZ_CHECK(parts.feed(piece, split_sink));
  }
  FUZZ_CHECK(whole_sink.log == split_sink.log);
  FUZZ_CHECK(whole.atEventBoundary() == parts.atEventBoundary());
  return 0;
}
