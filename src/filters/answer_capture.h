// An answer as the client gets it, copied as it passes (never delaying it) up to a bound:
// what the idempotency and cache filters keep. Complete once its last piece, or a whole
// body, came without the stream being cut; beyond the bound nothing is kept (and nothing
// more copied), which the caller may still need to know (tooLarge).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "filters/filter.h"

namespace tahua {

class AnswerCapture {
 public:
  // A piece of a stream (onResponseData).
  void piece(const ResponseData& data, std::size_t max) {
    if (cut_) return;
    if (data.aborted() || data.failed()) {
      cut_ = true;  // a stream that did not end normally is never kept
      drop();
      return;
    }
    append(data.bytes(), max);
    if (data.last()) complete_ = true;
  }
  // A whole body (onResponseBody).
  void body(std::string_view bytes, std::size_t max) {
    append(bytes, max);
    complete_ = true;
  }

  bool complete() const { return complete_ && !cut_; }
  bool tooLarge() const { return too_large_; }
  std::string take() { return std::move(bytes_); }

 private:
  void append(std::string_view bytes, std::size_t max) {
    if (too_large_) return;
    if (bytes_.size() + bytes.size() > max) {
      too_large_ = true;
      drop();
      return;
    }
    bytes_.append(bytes);
  }
  void drop() {
    bytes_.clear();
    bytes_.shrink_to_fit();
  }

  std::string bytes_;
  bool complete_ = false;
  bool too_large_ = false;
  bool cut_ = false;
};

}  // namespace tahua
