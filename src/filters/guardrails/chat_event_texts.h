// A chat completions stream event's texts, read without a DOM. Most events of a guarded
// stream are chat chunks ({"choices":[{"index":0,"delta":{"content":"..."}}]}); a
// Boost.JSON DOM of each was ~38% of a guarded event's cost (docs/benchmarks.md, issue
// 41 item 6). simdjson's on-demand parser reads the same fields as eventTexts does from
// the DOM, with the same answers: the last of duplicate keys (as Boost.JSON keeps it),
// keys unescaped, `index` only when an int64, a piece only when a string.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tahua::guardrail_texts {

// Bytes simdjson may read past an event's end (SIMDJSON_PADDING; checked where simdjson
// is included). Their content does not matter to it; they must be readable.
inline constexpr std::size_t kEventPadding = 64;

struct ChatEventTexts {
  struct Piece {
    unsigned channel;       // the choice's index × 1024
    std::string_view text;  // unescaped; valid until the next call on this thread
  };
  std::vector<Piece> pieces;    // delta.content, in order of the choices
  std::vector<unsigned> closes;  // the channels whose finish_reason is not null
  std::string padded;            // an event copied with simdjson's padding (its memory reused)
};

// False when the event is anything this does not read as eventTexts would (tool calls,
// JSON it cannot parse, anything after the object): the caller then parses it into a DOM.
// `padded`: kEventPadding readable bytes follow the event in memory, so it is read in
// place; otherwise it is copied first.
bool chatEventTexts(std::string_view event, bool padded, ChatEventTexts& out);

}  // namespace tahua::guardrail_texts
