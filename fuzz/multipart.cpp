// The multipart/form-data scanner (src/http/multipart.h), which reads every upload as it
// arrives.
//
// Input: one control byte (where to cut the body into two pieces, and the piece size
// after that), then the body with the boundary "b".
// Beyond "no crash": the same body fed whole and fed in pieces gives the same verdict,
// the same parts and the same text values; every part's offsets lie inside the body,
// in order.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "http/multipart.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tahua;
  fuzz::Input in(data, size);
  const unsigned control = in.byte();
  const std::string body(in.rest());
  MultipartScanner::Limits limits;
  limits.max_text_bytes = 256;
  limits.max_parts = 8;
  limits.max_head_bytes = 128;

  MultipartScanner whole("b", limits);
  const bool whole_ok = whole.feed(body) && whole.finish();

  MultipartScanner pieces("b", limits);
  const std::size_t piece = 1 + (control & 7);
  std::size_t at = std::min<std::size_t>(body.size(), control >> 3);
  bool pieces_ok = pieces.feed(std::string_view(body).substr(0, at));
  while (pieces_ok && at < body.size()) {
    pieces_ok = pieces.feed(std::string_view(body).substr(at, piece));
    at += piece;
  }
  pieces_ok = pieces_ok && pieces.finish();

  if (whole_ok != pieces_ok) __builtin_trap();
  if (!whole_ok) return 0;
  if (whole.parts().size() != pieces.parts().size()) __builtin_trap();
  std::uint64_t last = 0;
  for (std::size_t i = 0; i < whole.parts().size(); ++i) {
    const FormPart& a = whole.parts()[i];
    const FormPart& b = pieces.parts()[i];
    if (a.name != b.name || a.filename != b.filename || a.value != b.value || a.head_begin != b.head_begin ||
        a.data_begin != b.data_begin || a.data_end != b.data_end)
      __builtin_trap();
    if (a.head_begin < last || a.data_begin < a.head_begin || a.data_end < a.data_begin || a.data_end > body.size())
      __builtin_trap();
    if (!a.file() && body.compare(a.data_begin, a.data_end - a.data_begin, a.value) != 0) __builtin_trap();
    last = a.data_end;
  }
  return 0;
}
