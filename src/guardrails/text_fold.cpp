#include "guardrails/text_fold.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <cstring>

namespace tahua::guardrails {
namespace {

const icu::Normalizer2* nfkc() {
  static const icu::Normalizer2* n = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* p = icu::Normalizer2::getNFKCInstance(status);
    return U_SUCCESS(status) ? p : nullptr;
  }();
  return n;
}

bool invisible(UChar32 c) { return (c >= 0x200B && c <= 0x200D) || c == 0x2060 || c == 0xFEFF || c == 0x180E; }
bool tag(UChar32 c) { return c >= 0xE0000 && c <= 0xE007F; }

}  // namespace

bool foldIsIdentity(std::string_view in) {
  // Eight bytes at a time: any byte with its high bit set is not ASCII.
  std::size_t i = 0;
  for (; i + 8 <= in.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, in.data() + i, 8);
    if (w & 0x8080808080808080ULL) return false;
  }
  for (; i < in.size(); ++i)
    if (static_cast<unsigned char>(in[i]) & 0x80) return false;
  return true;
}

void foldAppend(std::string_view in, std::size_t base, std::string& out, std::vector<std::uint32_t>& origin, FoldStats& stats) {
  const icu::Normalizer2* norm = nfkc();
  const auto* s = reinterpret_cast<const std::uint8_t*>(in.data());
  const auto n = static_cast<std::int32_t>(in.size());
  std::int32_t i = 0;
  std::string piece;
  while (i < n) {
    const std::int32_t start = i;
    const auto at = static_cast<std::uint32_t>(base + static_cast<std::size_t>(start));
    if (s[i] < 0x80) {  // ASCII is its own NFKC form
      out.push_back(static_cast<char>(s[i++]));
      origin.push_back(at);
      continue;
    }
    UChar32 c;
    U8_NEXT(s, i, n, c);
    if (c < 0) {  // not UTF-8: the bytes as they are
      for (std::int32_t k = start; k < i; ++k) {
        out.push_back(static_cast<char>(s[k]));
        origin.push_back(at);
      }
      continue;
    }
    if (invisible(c)) {
      ++stats.invisible;
      continue;
    }
    if (tag(c)) {
      ++stats.tags;
      continue;
    }
    if (!norm || norm->isInert(c)) {
      out.append(reinterpret_cast<const char*>(s + start), static_cast<std::size_t>(i - start));
      origin.insert(origin.end(), static_cast<std::size_t>(i - start), at);
      continue;
    }
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString folded = norm->normalize(icu::UnicodeString(c), status);
    piece.clear();
    if (U_SUCCESS(status)) folded.toUTF8String(piece);
    else piece.assign(reinterpret_cast<const char*>(s + start), static_cast<std::size_t>(i - start));
    out += piece;
    origin.insert(origin.end(), piece.size(), at);
  }
}

Range originalRange(const std::vector<std::uint32_t>& origin, std::size_t fbegin, std::size_t fend, std::size_t orig_size) {
  Range r;
  if (fbegin >= origin.size() || fend <= fbegin) return r;
  r.begin = origin[fbegin];
  const std::uint32_t last = origin[fend - 1];
  std::size_t k = fend;
  while (k < origin.size() && origin[k] == last) ++k;  // the rest of the last character's expansion
  r.end = k < origin.size() ? origin[k] : orig_size;
  return r;
}

}  // namespace tahua::guardrails
