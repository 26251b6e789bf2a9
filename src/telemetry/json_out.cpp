#include "telemetry/json_out.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace tahua {

void JsonBuf::grow(std::size_t n) {
  const std::size_t used = size();
  const std::size_t cap = std::max<std::size_t>(4096, std::max(used + n, 2 * static_cast<std::size_t>(end_ - begin_.get())));
  std::unique_ptr<char[]> bigger(new char[cap]);
  if (used) std::memcpy(bigger.get(), begin_.get(), used);
  begin_ = std::move(bigger);
  p_ = begin_.get() + used;
  end_ = begin_.get() + cap;
}

namespace json_out {
namespace {

// Whether any of the 8 bytes in `w` is < 0x20, '"' or '\\' (SWAR: a byte-wise compare
// without a loop per byte; strings here are mostly names that need no escaping).
inline bool needsEscape(std::uint64_t w) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  const std::uint64_t below = (w - kOnes * 0x20) & ~w & kHigh;  // a byte < 0x20 (of those < 0x80)
  const std::uint64_t q = w ^ (kOnes * '"'), b = w ^ (kOnes * '\\');
  const std::uint64_t quote = (q - kOnes) & ~q & kHigh, slash = (b - kOnes) & ~b & kHigh;
  return (below | quote | slash) != 0;
}

}  // namespace

char* escapedAt(char* p, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  // The caller has room for the worst case (every byte as \u00XX) and at least a word.
  const std::size_t n = s.size();
  if (n == 0) return p;  // (an empty view's data() may be null: no memcpy from it)
  std::size_t i = 0;
  if (n < 8) {
    // Most strings here (names, ids' parts): 4 to 7 bytes as two overlapping 4-byte words
    // (a copy of variable length would be a call), checked as one; fewer byte by byte.
    if (n >= 4) {
      std::uint32_t lo, hi;
      std::memcpy(&lo, s.data(), 4);
      std::memcpy(&hi, s.data() + n - 4, 4);
      if (!needsEscape(static_cast<std::uint64_t>(hi) << 32 | lo)) {
        std::memcpy(p, &lo, 4);
        std::memcpy(p + n - 4, &hi, 4);
        return p + n;
      }
    }
  } else {
    for (; i + 8 <= n; i += 8) {  // the common case: nothing to escape
      std::uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (needsEscape(w)) break;
      std::memcpy(p, &w, 8);
      p += 8;
    }
    if (i < n && i + 8 > n) {
      // Fewer than 8 left after clean words: the string's last 8 bytes as one word,
      // rewriting the (8 - left) bytes before them with what they already are.
      std::uint64_t w;
      std::memcpy(&w, s.data() + n - 8, 8);
      if (!needsEscape(w)) {
        std::memcpy(p - (8 - (n - i)), &w, 8);
        return p + (n - i);
      }
    }
  }
  for (; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') {
      *p++ = static_cast<char>(c);
      continue;
    }
    *p++ = '\\';
    switch (c) {
      case '"': *p++ = '"'; break;
      case '\\': *p++ = '\\'; break;
      case '\n': *p++ = 'n'; break;
      case '\r': *p++ = 'r'; break;
      case '\t': *p++ = 't'; break;
      default:
        *p++ = 'u';
        *p++ = '0';
        *p++ = '0';
        *p++ = kHex[c >> 4];
        *p++ = kHex[c & 15];
    }
  }
  return p;
}

void escaped(JsonBuf& out, std::string_view s) {
  if (s.empty()) return;
  out.advance(escapedAt(out.reserve(6 * s.size() + 8), s));
}

void string(JsonBuf& out, std::string_view s) {
  out.push_back('"');
  escaped(out, s);
  out.push_back('"');
}

void string(std::string& out, std::string_view s) {
  JsonBuf b;
  string(b, s);
  out.append(b.data(), b.size());
}

char* integerAt(char* p, std::int64_t v) { return std::to_chars(p, p + 20, v).ptr; }

void integer(JsonBuf& out, std::int64_t v) { out.advance(integerAt(out.reserve(20), v)); }

char* numberAt(char* p, double v) {
  if (!std::isfinite(v)) return literalAt(p, "null");
  return std::to_chars(p, p + 32, v).ptr;
}

void number(JsonBuf& out, double v) { out.advance(numberAt(out.reserve(32), v)); }

char* millisAt(char* p, std::chrono::nanoseconds d) {
  // Microsecond precision, written as integer digits: far cheaper than a double's
  // shortest round trip, and what a log or record needs.
  std::int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  if (us < 0) {
    *p++ = '-';
    us = -us;
  }
  p = integerAt(p, us / 1000);
  const auto frac = static_cast<int>(us % 1000);
  if (frac == 0) return p;
  char f[4] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10), static_cast<char>('0' + frac % 10)};
  std::size_t n = 4;
  while (f[n - 1] == '0') --n;
  std::memcpy(p, f, 4);  // (room for all four; n of them count)
  return p + n;
}

void millis(JsonBuf& out, std::chrono::nanoseconds d) { out.advance(millisAt(out.reserve(28), d)); }

char* timeAt(char* p, std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  // The calendar part changes once a second: formatted then, per thread.
  struct Cached {
    std::int64_t second = -1;
    char text[20];
  };
  thread_local Cached cache;
  const auto since = duration_cast<milliseconds>(t.time_since_epoch()).count();
  const std::int64_t second = since >= 0 ? since / 1000 : (since - 999) / 1000;
  const auto ms = static_cast<int>(since - second * 1000);
  if (second != cache.second) {
    const std::time_t tt = static_cast<std::time_t>(second);
    std::tm tm{};
    gmtime_r(&tt, &tm);
    char buf[80];  // room for any int fields (the compiler cannot know the years are 4 digits)
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                  tm.tm_min, tm.tm_sec);
    std::memcpy(cache.text, buf, 19);
    cache.second = second;
  }
  p[0] = '"';
  std::memcpy(p + 1, cache.text, 19);
  p[20] = '.';
  p[21] = static_cast<char>('0' + ms / 100);
  p[22] = static_cast<char>('0' + ms / 10 % 10);
  p[23] = static_cast<char>('0' + ms % 10);
  p[24] = 'Z';
  p[25] = '"';
  return p + 26;
}

void time(JsonBuf& out, std::chrono::system_clock::time_point t) { out.advance(timeAt(out.reserve(26), t)); }

}  // namespace json_out
}  // namespace tahua
