// Formats HTTP/1.1 message heads into a reusable string. Beast parses everything we
// read; for what we write we format the head ourselves: Beast's serializer spent about
// a third of all proxy CPU walking its buffer-sequence views (callgrind, see
// docs/benchmarks.md), while a head is a few appends. Values written here come from the
// config (validated: no CR/LF), from Beast's parser (validated) or from the gateway.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace tahua {

class HeadWriter {
 public:
  explicit HeadWriter(std::string& out) : out_(out) { out_.clear(); }

  void statusLine(int status);  // "HTTP/1.1 200 OK\r\n"
  void requestLine(std::string_view method, std::string_view target) {
    append(method, " ", target, " HTTP/1.1\r\n");
  }
  // One size check and two copies rather than four appends: a head has a dozen of these.
  void header(std::string_view name, std::string_view value) {
    const std::size_t at = out_.size();
    out_.resize(at + name.size() + value.size() + 4);
    char* p = out_.data() + at;
    p = std::copy(name.begin(), name.end(), p);
    *p++ = ':';
    *p++ = ' ';
    p = std::copy(value.begin(), value.end(), p);
    *p++ = '\r';
    *p = '\n';
  }
  void contentLength(std::size_t n);
  void end() { out_ += "\r\n"; }

 private:
  template <class... Parts>
  void append(const Parts&... parts) {
    (out_.append(std::string_view(parts)), ...);
  }
  std::string& out_;
};

// "1a2b\r\n": the size line of one chunk of a chunked body (at most 18 bytes).
std::string_view chunkSizeLine(std::size_t size, char (&buf)[20]);

}  // namespace tahua
