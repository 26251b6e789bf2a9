// Ids of the responses and items tahua issues for the Responses API (the answers it
// translates, and so keeps: see src/filters/responses/). A response id is "resp_" and 32
// base62 characters: 6 for the second it was made (so a replica knows an id may be too
// young for its id filter to have heard of) and 26 from OpenSSL's CSPRNG (154 bits: not
// guessable); an item's id is
// derived from its response's: "<prefix>_<R>o<n>" for output item n, "<prefix>_<R>i<n>"
// for input item n. So an item_reference finds its response with one lookup, and an id
// tahua did not issue (OpenAI's own, for answers passed through) is told apart by shape.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tahua {

inline constexpr std::size_t kResponseKeyChars = 32;

std::string newResponseId();
// Whether response key R was made within `seconds` of now (or its time is not one tahua
// writes: an id from before the time prefix, or from a clock ahead): its lookups must
// ask the store itself.
bool responseKeyIsRecent(std::string_view response_key, long long seconds);
// R of a response id tahua issued ("resp_" + R); empty for any other text.
std::string_view responseKeyOf(std::string_view response_id);
std::string responseIdFor(std::string_view response_key);  // "resp_" + R
// "<prefix>_<R>o<n>" or "<prefix>_<R>i<n>".
std::string itemIdFor(std::string_view prefix, std::string_view response_key, bool output, std::size_t index);

struct ItemRef {
  std::string_view response_key;
  bool output = true;
  std::size_t index = 0;
};
// An item id tahua issued, taken apart; nullopt for any other text.
std::optional<ItemRef> parseItemId(std::string_view id);

}  // namespace tahua
