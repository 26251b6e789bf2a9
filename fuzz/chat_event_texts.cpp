// A chat completions stream event read without a DOM (src/filters/guardrails/
// chat_event_texts.cpp) against the DOM's reading (guarded_texts.cpp's eventTexts), which
// the guardrails trusted before: a differential target.
// Checked beyond "no crash": whenever the DOM parses the bytes and the reader does not
// decline, both find the same texts (bytes, channels, order) and close the same choices.
// A reader that took the first of duplicate keys, or skipped an escaped key, would let a
// text past the rules that the client then shows.
#include <cstdint>
#include <string_view>

#include <boost/json.hpp>

#include "filters/guardrails/chat_event_texts.h"
#include "filters/guardrails/guarded_texts.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tahua;
  namespace gt = guardrail_texts;
  const std::string_view event(reinterpret_cast<const char*>(data), size);
  gt::ChatEventTexts fast;
  const bool read = gt::chatEventTexts(event, fast);
  boost::system::error_code ec;
  boost::json::value doc = boost::json::parse(event, ec);
  if (ec || !read) return 0;
  gt::EventTexts dom;
  gt::eventTexts(Endpoint::ChatCompletions, doc, dom);
  FUZZ_CHECK(fast.pieces.size() == dom.pieces.size());
  for (std::size_t i = 0; i < dom.pieces.size(); ++i) {
    FUZZ_CHECK(fast.pieces[i].channel == dom.pieces[i].channel);
    FUZZ_CHECK(fast.pieces[i].text == std::string_view(*dom.pieces[i].text));
  }
  FUZZ_CHECK(fast.closes == dom.closes);
  return 0;
}
