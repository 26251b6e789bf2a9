// Whole answers (src/translate/): a vendor's response body through its codec's
// decodeResponse() and then a client API's encodeResult(), and the same body as an error
// answer through decodeError() and encodeUpstreamError(), as TranslatingTranslator::onBody
// does (OpenAI, Anthropic, Gemini, Bedrock vendors; OpenAI chat, Anthropic Messages and
// OpenAI Responses clients).
//
// Input: a control byte (vendor, client API, error status), then the body.
// Checked beyond "no crash": whatever the vendor sent, the client gets a JSON object (a
// codec that cut a string mid-UTF-8 would send invalid JSON), and a 4xx/5xx error stays
// a 4xx/5xx whatever its body says.
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

using namespace tahua;

const InboundCodec& inbound(int i) {
  switch (i) {
    case 0: return openAIChatInbound();
    case 1: return anthropicInbound();
    default: return responsesInbound();
  }
}

void checkJsonObject(const std::string& text) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(text, ec);
  FUZZ_CHECK(!ec && v.is_object());
}

// 302: an upstream redirect also reaches decodeError (any non-2xx status does).
constexpr int kStatuses[] = {400, 401, 403, 404, 408, 413, 422, 429, 500, 502, 503, 504, 529, 302};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::unique_ptr<VendorCodec> vendors[] = {makeOpenAIChatCodec(), makeAnthropicCodec(), makeGeminiCodec(),
                                                         makeBedrockCodec()};
  fuzz::Input in(data, size);
  const std::uint8_t control = in.byte();
  const VendorCodec& vendor = *vendors[control % 4];
  const InboundCodec& client = inbound((control >> 2) % 3);
  const int status = kStatuses[(control >> 4) % std::size(kStatuses)];
  const std::string_view body = in.rest();
  InboundOptions options;
  options.model = "client-model";

  auto decoded = vendor.decodeResponse(body);
  if (auto* result = std::get_if<ChatResult>(&decoded)) checkJsonObject(client.encodeResult(*result, options));

  const UpstreamErrorInfo info = vendor.decodeError(status, body);
  if (status >= 400) FUZZ_CHECK(info.status >= 400 && info.status <= 599);
  checkJsonObject(client.encodeUpstreamError(info));
  return 0;
}
