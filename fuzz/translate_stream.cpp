// Streaming answers (src/translate/): a vendor's stream body through its codec's
// streamDecoder() (OpenAI and Anthropic SSE, Gemini SSE, Bedrock's AWS event stream),
// each chunk through a client API's streamEncoder() (OpenAI chat, Anthropic Messages,
// OpenAI Responses), as TranslatingTranslator does with every translated stream.
//
// Input: a control byte (vendor, client API, include_usage, fix Bedrock CRCs), a 16-bit
// split choice, then the stream body.
// Checked beyond "no crash":
// - the decoder promises the same chunks for any split: the body is decoded whole and cut
//   at two fuzzer-chosen points, and the chunks and the error must match (tool call ids
//   are left out of the comparison: a vendor that names none gets random ones);
// - what the encoder writes for the client is SSE whose every data payload is JSON
//   (or OpenAI's [DONE]), an error ending included.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/parse.hpp>

#include "event_stream_crc.h"
#include "fuzz_input.h"
#include "sse/sse_parser.h"
#include "translate/bedrock_codec.h"
#include "translate/gemini_codec.h"
#include "translate/inbound.h"

namespace {

using namespace tahua;

const InboundCodec& inbound(int i) {
  switch (i) {
    case 0: return openAIChatInbound();
    case 1: return anthropicInbound();
    default: return responsesInbound();
  }
}

std::string describe(const ChatChunk& c) {
  std::string s(c.start ? "S|" : "|");
  for (const auto* part : {&c.id, &c.model, &c.content, &c.finish_reason}) s.append(*part).push_back('|');
  for (const auto& t : c.tool_calls) s.append(std::to_string(t.index)).append(",").append(t.name).append(",").append(t.arguments).append(";");
  if (c.usage)
    for (const auto n : {c.usage->prompt_tokens, c.usage->completion_tokens, c.usage->cached_tokens}) s.append(",").append(std::to_string(n));
  return s;
}

struct Relay : ChunkSink {
  explicit Relay(std::unique_ptr<ChatStreamEncoder> e) : encoder(std::move(e)) {}
  void onChunk(const ChatChunk& chunk) override {
    chunks.push_back(describe(chunk));
    encoder->onChunk(chunk, out);
  }
  std::unique_ptr<ChatStreamEncoder> encoder;
  std::vector<std::string> chunks;
  std::optional<std::string> error;
  std::string out;  // what the client receives
};

// Runs the pieces through a fresh decoder the way TranslatingTranslator::onStreamBytes does.
void relay(const VendorCodec& vendor, const std::vector<std::string_view>& pieces, Relay& r) {
  auto decoder = vendor.streamDecoder();
  std::optional<Error> err;
  for (const auto piece : pieces) {
    const std::string copy(piece);  // freed after the feed: a view kept into it is caught
    if (!copy.empty()) err = decoder->feed(copy, r);
    if (err) break;
  }
  if (!err) err = decoder->finish(r);
  if (err) {
    r.error = err->message;
    r.encoder->fail(*err, r.out);
  } else {
    r.encoder->finish(r.out);
  }
}

struct JsonEvents : SseSink {
  void onEvent(const SseEvent& e) override {
    if (e.data == "[DONE]") return;
    boost::system::error_code ec;
    boost::json::parse(e.data, ec);
    if (ec) std::fprintf(stderr, "event %.*s, data not JSON: %.*s\n", static_cast<int>(e.event.size()), e.event.data(),
                         static_cast<int>(e.data.size()), e.data.data());
    FUZZ_CHECK(!ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::unique_ptr<VendorCodec> vendors[] = {makeOpenAIChatCodec(), makeAnthropicCodec(), makeGeminiCodec(),
                                                         makeBedrockCodec()};
  fuzz::Input in(data, size);
  const std::uint8_t control = in.byte();
  const std::uint16_t split = in.u16();
  const int vendor = control % 4;
  InboundOptions options;
  options.model = "client-model";
  options.include_usage = control & 0x10;
  const InboundCodec& client = inbound((control >> 2) % 4 % 3);
  std::string body(in.rest());
  if (vendor == 3 && (control & 0x20)) fuzz::fixEventStreamCrcs(body);
  const std::string_view s = body;
  const std::size_t a = fuzz::splitPoint(split, s.size());
  const std::size_t b = a + fuzz::splitPoint(split >> 4, s.size() - a);

  Relay whole(client.streamEncoder(options));
  relay(*vendors[vendor], {s}, whole);
  Relay parts(client.streamEncoder(options));
  relay(*vendors[vendor], {s.substr(0, a), s.substr(a, b - a), s.substr(b)}, parts);
  FUZZ_CHECK(whole.chunks == parts.chunks);
  FUZZ_CHECK(whole.error == parts.error);

  SseParser parser;
  JsonEvents check;
  FUZZ_CHECK(parser.feed(whole.out, check));
  FUZZ_CHECK(parser.atEventBoundary());
  return 0;
}
