// A cached answer in the form a hit asks for. Kept as the first client got it (its API's
// bytes, streamed or not); a hit of the same form gets those bytes again, event by event.
// A hit in the other form (a stream for an answer kept whole, or the reverse; an OpenAI
// stream with or without the usage chunk) is decoded into the canonical result and
// encoded again by the client API's codec, as a live translated answer would be.
#pragma once

#include <optional>
#include <string>

#include "cache/response_cache.h"
#include "request/request_context.h"
#include "translate/chat.h"
#include "translate/inbound.h"

namespace tahua {

// The canonical result of a kept answer; nullopt if its bytes cannot be read.
std::optional<ChatResult> decodeCachedAnswer(const CachedAnswer& answer);

struct AnswerForm {
  std::string body;
  std::string content_type;
};
// The answer for a request to `endpoint` (`stream`, `include_usage`); `options` are what
// the client API's encoder needs (its model name, the Responses echo).
std::optional<AnswerForm> cachedAnswerAs(const CachedAnswer& answer, Endpoint endpoint, bool stream, bool include_usage,
                                         const InboundOptions& options);

}  // namespace tahua
