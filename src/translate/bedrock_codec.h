// Amazon Bedrock Converse / ConverseStream codec: OpenAI chat shape <-> Converse JSON,
// and ConverseStream's AWS event-stream body -> ChatChunk.
//
// The request path is relative to the provider's base URL
// (https://bedrock-runtime.<region>.amazonaws.com): "/model/<model id, URI-encoded>/converse"
// or ".../converse-stream". The adapter signs the request with SigV4 (aws/sigv4.h, service
// "bedrock"); the codec knows nothing of credentials.
#pragma once

#include <memory>

#include "translate/chat.h"

namespace tahua {

std::unique_ptr<VendorCodec> makeBedrockCodec();

}  // namespace tahua
