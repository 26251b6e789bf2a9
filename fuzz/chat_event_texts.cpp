// A chat completions stream event read without a DOM (src/filters/guardrails/
// chat_event_texts.cpp) against the DOM's reading (guarded_texts.cpp's eventTexts), which
// the guardrails trusted before: a differential target.
// Checked beyond "no crash": whenever the DOM parses the bytes and the reader does not
// decline, both find the same texts (bytes, channels, order) and close the same choices.
// A reader that took the first of duplicate keys, or skipped an escaped key, would let a
// text past the rules that the client then shows. The event is also read in place with
// the bytes a stream has after it (the filter reads one-line events inside its buffer):
// the reading must not depend on them.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "filters/guardrails/chat_event_texts.h"
#include "filters/guardrails/guarded_texts.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tahua;
  namespace gt = guardrail_texts;
  const std::string_view event(reinterpret_cast<const char*>(data), size);
  // Read copied (as a multi-line event is); its texts kept, since a reading's views
  // last until the next call on the thread.
  gt::ChatEventTexts fast;
  const bool read = gt::chatEventTexts(event, false, fast);
  std::vector<std::pair<unsigned, std::string>> pieces;
  for (const auto& p : fast.pieces) pieces.emplace_back(p.channel, std::string(p.text));
  const std::vector<unsigned> closes = fast.closes;
  // In place, followed by what could mislead a reader that looked past the end.
  std::string stream(event);
  stream.append("\"}]}\\\"{[,:0\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"after\"}}]}\n\n");
  stream.append(gt::kEventPadding, '"');
  gt::ChatEventTexts in_place;
  FUZZ_CHECK(gt::chatEventTexts(std::string_view(stream).substr(0, size), true, in_place) == read);
  if (read) {
    FUZZ_CHECK(in_place.pieces.size() == pieces.size());
    for (std::size_t i = 0; i < pieces.size() && i < in_place.pieces.size(); ++i) {
      FUZZ_CHECK(in_place.pieces[i].channel == pieces[i].first);
      FUZZ_CHECK(in_place.pieces[i].text == pieces[i].second);
    }
    FUZZ_CHECK(in_place.closes == closes);
  }
  boost::system::error_code ec;
  boost::json::parse_options depth;
  depth.max_depth = 1024;  // as the filter reads events (core/json_read.h)
  boost::json::value doc = boost::json::parse(event, ec, {}, depth);
  if (ec || !read) return 0;
  gt::EventTexts dom;
  gt::eventTexts(Endpoint::ChatCompletions, doc, dom);
  FUZZ_CHECK(pieces.size() == dom.pieces.size());
  for (std::size_t i = 0; i < dom.pieces.size() && i < pieces.size(); ++i) {
    FUZZ_CHECK(pieces[i].first == dom.pieces[i].channel);
    FUZZ_CHECK(pieces[i].second == std::string_view(*dom.pieces[i].text));
  }
  FUZZ_CHECK(closes == dom.closes);
  return 0;
}
