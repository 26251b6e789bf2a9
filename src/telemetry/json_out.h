// Appending JSON to a buffer: usage records, spans and access-log lines are written on
// the worker straight into the batch that goes to the exporter. JsonBuf is a growable
// byte buffer written through a raw pointer: one capacity check per field instead of
// one per append (std::string's append checks, may grow, and calls memcpy each time;
// callgrind put that at several hundred instructions per attribute). No document tree,
// no allocation per field.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace tahua {

class JsonBuf {
 public:
  JsonBuf() = default;
  // Moved, its memory goes along (a batch handed to another thread without a copy); the
  // source is left empty, without memory.
  JsonBuf(JsonBuf&& o) noexcept
      : begin_(std::move(o.begin_)), p_(std::exchange(o.p_, nullptr)), end_(std::exchange(o.end_, nullptr)) {}
  JsonBuf& operator=(JsonBuf&& o) noexcept {
    begin_ = std::move(o.begin_);
    p_ = std::exchange(o.p_, nullptr);
    end_ = std::exchange(o.end_, nullptr);
    return *this;
  }
  std::size_t capacity() const { return static_cast<std::size_t>(end_ - begin_.get()); }

  const char* data() const { return begin_.get(); }
  std::size_t size() const { return static_cast<std::size_t>(p_ - begin_.get()); }
  bool empty() const { return size() == 0; }
  std::string_view view() const { return {data(), size()}; }
  void clear() { p_ = begin_.get(); }
  char back() const { return p_[-1]; }
  void pop_back() { --p_; }
  void truncate(std::size_t n) { p_ = begin_.get() + n; }  // n <= size()

  // Room for `n` more bytes; the returned pointer is where they go (then advance()).
  char* reserve(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) grow(n);
    return p_;
  }
  void advance(char* to) { p_ = to; }

  void raw(const char* s, std::size_t n) {
    std::memcpy(reserve(n), s, n);
    p_ += n;
  }
  void raw(std::string_view s) { raw(s.data(), s.size()); }
  void push_back(char c) {
    *reserve(1) = c;
    ++p_;
  }

 private:
  void grow(std::size_t n);
  std::unique_ptr<char[]> begin_;
  char* p_ = nullptr;
  char* end_ = nullptr;
};

namespace json_out {

// Writing through a raw pointer into room reserved once for a whole line (a bound from
// the record's size): no capacity check per field, and literals of known length copied
// as constants (the formatters of the access log and the usage records, off the worker,
// spent half their instructions on per-field reserves and key copies). Each returns
// where the next byte goes; the room each needs is in its comment.
template <std::size_t N>
inline char* literalAt(char* p, const char (&s)[N]) {  // N - 1
  std::memcpy(p, s, N - 1);
  return p + N - 1;
}
inline char* bytesAt(char* p, std::string_view s) {  // s.size()
  if (!s.empty()) std::memcpy(p, s.data(), s.size());
  return p + s.size();
}
char* escapedAt(char* p, std::string_view s);  // 6 * s.size() + 8
inline char* stringAt(char* p, std::string_view s) {  // 6 * s.size() + 10
  *p++ = '"';
  p = escapedAt(p, s);
  *p++ = '"';
  return p;
}
char* integerAt(char* p, std::int64_t v);                                 // 20
char* numberAt(char* p, double v);                                        // 32
char* millisAt(char* p, std::chrono::nanoseconds d);                      // 28
char* timeAt(char* p, std::chrono::system_clock::time_point t);           // 26
inline constexpr std::size_t kNumberRoom = 32;                            // the most any of the three writes

// `s` as a JSON string, quotes included (control characters as \u00XX; bytes >= 0x80
// are copied: the gateway's strings are UTF-8 already).
void string(JsonBuf& out, std::string_view s);
void escaped(JsonBuf& out, std::string_view s);  // the same without the quotes
void string(std::string& out, std::string_view s);
void integer(JsonBuf& out, std::int64_t v);
void number(JsonBuf& out, double v);  // shortest round trip, or null when not finite
// A duration in milliseconds with up to three decimals ("12.345"), from integers.
void millis(JsonBuf& out, std::chrono::nanoseconds d);
// "2026-12-01T15:20:30.123Z" (milliseconds), quoted.
void time(JsonBuf& out, std::chrono::system_clock::time_point t);

// `"key":` after a comma unless it opens the object.
inline void key(JsonBuf& out, std::string_view k) {
  char* p = out.reserve(k.size() + 4);
  if (p[-1] != '{') *p++ = ',';
  *p++ = '"';
  std::memcpy(p, k.data(), k.size());
  p += k.size();
  *p++ = '"';
  *p++ = ':';
  out.advance(p);
}

}  // namespace json_out
}  // namespace tahua
