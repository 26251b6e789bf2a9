// An incremental multipart/form-data scanner (RFC 7578) for uploads that are spooled to
// a file as they arrive: it is fed the body piece by piece, keeps the small text fields
// (the model, a prompt, `stream`), and for file parts only where they lie in the body.
// Nothing of a file part is held in memory beyond a boundary's length, so the form may
// put `file` before `model` (the openai SDK does) and still cost no buffer.
//
// Hand-written on purpose: no Debian package offers a streaming form-data parser that
// does not keep the parts (GMime builds a message tree in memory). The format is small:
// boundary lines, a few header lines per part, and the delimiter search (memmem).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tahua {

struct FormPart {
  std::string name;          // Content-Disposition name
  std::string filename;      // set for a file part (the SDKs always send one)
  std::string content_type;  // the part's Content-Type, if any
  std::uint64_t head_begin = 0;  // offset in the body of the part's header lines
  std::uint64_t data_begin = 0;  // of its content (after the empty line)
  std::uint64_t data_end = 0;    // of the CRLF before the next delimiter
  std::string value;         // a text field's content (file parts keep none)
  bool file() const { return !filename.empty(); }
};

// The boundary parameter of a multipart/form-data Content-Type, or nothing when the
// type is another or the boundary is missing or invalid (RFC 2046: 1 to 70 characters).
std::optional<std::string> formBoundary(std::string_view content_type);

class MultipartScanner {
 public:
  struct Limits {
    std::size_t max_parts = 64;
    std::size_t max_text_bytes = 64 * 1024;  // every text field's content together
    std::size_t max_head_bytes = 8 * 1024;   // one part's header lines
  };
  MultipartScanner(std::string_view boundary, Limits limits);

  // The next piece of the body. False once the body is malformed (error() says how);
  // bytes after the closing delimiter are ignored (the epilogue).
  bool feed(std::string_view bytes);
  // The body ended: false unless the closing delimiter was seen.
  bool finish();

  const std::string& error() const { return error_; }
  const std::vector<FormPart>& parts() const { return parts_; }
  std::vector<FormPart>& parts() { return parts_; }

 private:
  enum class State { Preamble, AfterDelimiter, Headers, Body, Done, Failed };
  // Consumes what it can decide of `view` (which starts at offset `at` of the virtual
  // stream); returns the bytes consumed (0: it needs more).
  std::size_t step(std::string_view view, std::uint64_t at);
  std::size_t scanBody(std::string_view view, std::uint64_t at);
  bool parseHeaders(std::string_view lines);
  bool fail(std::string message);

  std::string delimiter_;  // CRLF "--" boundary
  Limits limits_;
  State state_ = State::Preamble;
  std::string hold_;            // undecided bytes carried to the next feed
  std::uint64_t consumed_ = 0;  // of the virtual stream (a CRLF before the body, so the
                                // first delimiter looks like every other)
  std::size_t text_bytes_ = 0;
  std::vector<FormPart> parts_;
  std::string error_;
};

}  // namespace tahua
