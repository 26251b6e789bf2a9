#include "server/http_head.h"

#include <ostream>  // boost/core string_view needs it before Beast's status header

#include <boost/beast/http/status.hpp>
#include <charconv>

namespace tahua {

void HeadWriter::statusLine(int status) {
  char code[4];
  auto [end, ec] = std::to_chars(code, code + sizeof code, status);
  auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  append("HTTP/1.1 ", std::string_view(code, static_cast<std::size_t>(end - code)), " ",
         std::string_view(reason.data(), reason.size()), "\r\n");
}

void HeadWriter::contentLength(std::size_t n) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, n);
  append("Content-Length: ", std::string_view(digits, static_cast<std::size_t>(end - digits)), "\r\n");
}

std::string_view chunkSizeLine(std::size_t size, char (&buf)[20]) {
  auto [end, ec] = std::to_chars(buf, buf + 16, size, 16);
  *end++ = '\r';
  *end++ = '\n';
  return std::string_view(buf, static_cast<std::size_t>(end - buf));
}

}  // namespace tahua
