// Request translation (src/translate/): a client's body through its API's inbound codec
// (OpenAI chat, Anthropic Messages, OpenAI Responses: toChat) and the canonical request
// through every vendor codec's encodeRequest (OpenAI, Anthropic, Gemini, Bedrock), as
// TranslatingAdapter::translate does for each request that changes API.
//
// Input: a control byte (inbound codec, stream flag, which upstream model name), then the
// client's body.
// Checked beyond "no crash": an encoded request must be one the gateway can send: its
// body a JSON object (a codec that cut a string mid-UTF-8 sends invalid JSON) and its
// path a valid request target, since the client's model name can reach the path when a
// model has no deployment list (bytes like CR/LF/space there would split the request line).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <boost/json/parse.hpp>

#include "fuzz_input.h"
#include "translate/bedrock_codec.h"
#include "translate/gemini_codec.h"
#include "translate/inbound.h"

namespace {

namespace bj = boost::json;

const tahua::InboundCodec& inbound(int i) {
  switch (i) {
    case 0: return tahua::openAIChatInbound();
    case 1: return tahua::anthropicInbound();
    default: return tahua::responsesInbound();
  }
}

bool validTarget(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  for (const char c : path)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tahua;
  static const std::unique_ptr<VendorCodec> vendors[] = {makeOpenAIChatCodec(), makeAnthropicCodec(), makeGeminiCodec(),
                                                         makeBedrockCodec()};
  fuzz::Input in(data, size);
  const std::uint8_t control = in.byte();
  auto chat = inbound(control % 3).toChat(in.rest());
  auto* object = std::get_if<bj::object>(&chat);
  if (!object) return 0;

  EncodeOptions options;
  options.stream = control & 0x10;
  options.default_max_tokens = control & 0x20 ? 1 : 4096;
  // Usually the client's own model name (what a model without deployments sends
  // upstream), else a configured-looking id.
  const bj::value* model = object->if_contains("model");
  if (!(control & 0x40) && model && model->is_string()) options.upstream_model = std::string(model->get_string());
  else options.upstream_model = control & 0x80 ? "anthropic.claude-3-5-sonnet-20240620-v1:0" : "gemini-1.5-flash";

  for (const auto& vendor : vendors) {
    auto encoded = vendor->encodeRequest(*object, options);
    auto* request = std::get_if<EncodedRequest>(&encoded);
    if (!request) continue;
    FUZZ_CHECK(validTarget(request->path));
    boost::system::error_code ec;
    const bj::value body = bj::parse(request->body, ec);
    FUZZ_CHECK(!ec && body.is_object());
  }
  return 0;
}
