#include "guardrails/text_fold.h"

// NFKC by GNU libunistring (uninorm.h), not ICU: the same per-character folding, from a
// 1.8 MB library instead of ICU's 33 MB of code and data (half the runtime image).
#include <uninorm.h>
#include <unistr.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tahua::guardrails {
namespace {

bool invisible(ucs4_t c) { return (c >= 0x200B && c <= 0x200D) || c == 0x2060 || c == 0xFEFF || c == 0x180E; }
bool tag(ucs4_t c) { return c >= 0xE0000 && c <= 0xE007F; }

// NFKC of one character into `out` (UTF-32; a single character expands to at most 18);
// its length, 0 when the library could not.
std::size_t nfkc(ucs4_t c, ucs4_t (&out)[32]) {
  std::size_t len = 32;
  ucs4_t* r = u32_normalize(UNINORM_NFKC, &c, 1, out, &len);
  if (!r) return 0;
  if (r != out) {  // did not fit (cannot happen for one character): not folded
    std::free(r);
    return 0;
  }
  return len;
}

// Whether NFKC leaves a BMP character as it is (most do: CJK, Cyrillic, ...), learned once
// per character: 0 unknown, 1 yes, 2 no. Any thread may fill it; the answer is the same.
std::atomic<std::uint8_t> g_bmp_inert[0x10000];

bool inert(ucs4_t c) {
  if (c >= 0x10000) return false;
  std::uint8_t known = g_bmp_inert[c].load(std::memory_order_relaxed);
  if (known == 0) {
    ucs4_t out[32];
    const std::size_t n = nfkc(c, out);
    known = n == 1 && out[0] == c ? 1 : 2;
    g_bmp_inert[c].store(known, std::memory_order_relaxed);
  }
  return known == 1;
}

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
  const auto* s = reinterpret_cast<const std::uint8_t*>(in.data());
  const std::size_t n = in.size();
  std::size_t i = 0;
  while (i < n) {
    const std::size_t start = i;
    const auto at = static_cast<std::uint32_t>(base + start);
    if (s[i] < 0x80) {  // ASCII is its own NFKC form
      out.push_back(static_cast<char>(s[i++]));
      origin.push_back(at);
      continue;
    }
    ucs4_t c = 0;
    const int len = u8_mbtoucr(&c, s + i, n - i);
    if (len <= 0) {  // not UTF-8 (or cut): the byte as it is
      out.push_back(static_cast<char>(s[i++]));
      origin.push_back(at);
      continue;
    }
    i += static_cast<std::size_t>(len);
    if (invisible(c)) {
      ++stats.invisible;
      continue;
    }
    if (tag(c)) {
      ++stats.tags;
      continue;
    }
    ucs4_t folded[32];
    const std::size_t k = inert(c) ? 0 : nfkc(c, folded);
    if (k == 0 || (k == 1 && folded[0] == c)) {
      out.append(reinterpret_cast<const char*>(s + start), i - start);
      origin.insert(origin.end(), i - start, at);
      continue;
    }
    for (std::size_t j = 0; j < k; ++j) {
      std::uint8_t bytes[6];
      const int m = u8_uctomb(bytes, folded[j], 6);
      if (m <= 0) continue;
      out.append(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(m));
      origin.insert(origin.end(), static_cast<std::size_t>(m), at);
    }
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
