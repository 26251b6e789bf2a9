// Text as the guardrails match it: NFKC-folded per code point (full-width letters and
// digits, ligatures and other compatibility forms become their plain forms) with the
// invisible characters that hide text dropped, so that a rule cannot be dodged by
// "ｓｅｃｒｅｔ" or "se\u200Bcret". Every folded byte remembers where its character
// started in the original, so a match found in the folded text is redacted in the
// original one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tahua::guardrails {

struct FoldStats {
  std::size_t invisible = 0;  // zero-width characters dropped (U+200B..U+200D, U+2060, U+FEFF, U+180E)
  std::size_t tags = 0;       // Unicode tag characters (U+E0000..U+E007F): text a reader never sees
};

// Appends the folded form of `in` to `out`, and to `origin` (same length as `out`
// afterwards) the original offset (`base` + offset in `in`) of the character each byte
// came from. Invalid UTF-8 bytes are kept as they are.
void foldAppend(std::string_view in, std::size_t base, std::string& out, std::vector<std::uint32_t>& origin, FoldStats& stats);

// Whether folding would change nothing: plain ASCII without control tricks (the common
// case; the matcher then reads the text itself, with no copy and no map).
bool foldIsIdentity(std::string_view in);

// The original range [begin, end) of folded bytes [fbegin, fend), by `origin` (of a
// text whose original length is `orig_size`): whole characters, so a match that ends
// inside a character's expansion takes the character.
struct Range {
  std::size_t begin = 0, end = 0;
};
Range originalRange(const std::vector<std::uint32_t>& origin, std::size_t fbegin, std::size_t fend, std::size_t orig_size);

}  // namespace tahua::guardrails
