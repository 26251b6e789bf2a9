// HTTP/1.1 message heads as the gateway reads them. src/server/http_head.h only writes
// heads; everything read goes through Beast's parser, so this target drives that parser
// configured and checked the way the gateway does:
// - client requests (src/server/session.cpp, readRequest): request_parser<string_body>
//   with header_limit / body_limit from server.max_header_bytes / max_body_bytes, only
//   "chunked" accepted as Transfer-Encoding, the target an absolute path, then the body;
//   requests repeat on the same buffer as on a keep-alive connection (pipelining);
// - upstream responses (src/server/upstream_client.cpp): response_parser<InPlaceBody>
//   with a 64 KiB header limit and no body limit, the body parsed in place (eager) in
//   the buffer it was read into, an element a read cut carried to the next read.
// The bytes arrive in reads of a fuzzer-chosen size, as from a socket.
//
// Input: a control byte (request or response side, limits), a read size byte, then the
// bytes the peer sends.
// Checked beyond "no crash": a request the gateway accepts has the target and framing it
// checked, a body within the limit and, with Content-Length, exactly that long; a
// response body read to its end is exactly its Content-Length long (where a body may be).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include "fuzz_input.h"
#include "http/query.h"
#include "server/in_place_body.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// A SyncReadStream serving the fuzzed bytes in reads of at most `chunk` bytes, then EOF.
class FakeSocket {
 public:
  FakeSocket(std::string_view bytes, std::size_t chunk) : rest_(bytes), chunk_(chunk) {}

  template <class MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
    if (rest_.empty()) {
      ec = asio::error::eof;
      return 0;
    }
    ec = {};
    const std::size_t n = asio::buffer_copy(buffers, asio::buffer(rest_.data(), std::min(rest_.size(), chunk_)));
    rest_.remove_prefix(n);
    return n;
  }
  template <class MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers) {
    boost::system::error_code ec;
    const std::size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  std::string_view rest_;
  std::size_t chunk_;
};

// One request as Session::readRequest reads it; false when the connection would close.
bool readRequest(FakeSocket& socket, beast::flat_buffer& buffer, std::size_t header_limit, std::size_t body_limit) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(header_limit));
  parser.body_limit(body_limit);
  boost::system::error_code ec;
  http::read_header(socket, buffer, parser, ec);
  if (ec) return false;
  const auto& head = parser.get();
  if (auto te = head[http::field::transfer_encoding]; !te.empty() && !beast::iequals(te, "chunked")) return false;
  if (head.target().empty() || head.target().front() != '/') return false;
  if (!parser.is_done()) {
    http::read(socket, buffer, parser, ec);
    if (ec) return false;
  }
  const auto declared = parser.content_length();  // as sent (none when chunked)
  http::request<http::string_body> req = parser.release();
  FUZZ_CHECK(req.body().size() <= body_limit);
  if (declared) FUZZ_CHECK(req.body().size() == *declared);
  // What Session::serve and the filters take from the target.
  const std::string_view target = req.target();
  FUZZ_CHECK(!target.empty() && target.front() == '/');
  if (const auto q = target.find('?'); q != std::string_view::npos) {
    const std::string_view query = target.substr(q + 1);
    tahua::queryParam(query, "api-version");
    tahua::queryParam(query, "");
  }
  return req.keep_alive();
}

// One response as HttpExchange reads it: the head, then the body parsed in place in
// whatever each read brought after what the last one left unparsed.
void readResponse(FakeSocket& socket, beast::flat_buffer& buffer) {
  http::response_parser<tahua::InPlaceBody> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(boost::none);
  boost::system::error_code ec;
  http::read_header(socket, buffer, parser, ec);
  if (ec) return;
  parser.eager(true);
  const auto length = parser.content_length();
  std::string pending(static_cast<const char*>(buffer.data().data()), buffer.size());  // read with the head
  std::uint64_t total = 0;
  bool failed = false;
  for (int reads = 0; !parser.is_done(); ++reads) {
    if (reads > 0) {
      char chunk[4096];
      const std::size_t n = socket.read_some(asio::buffer(chunk), ec);
      if (ec == asio::error::eof) {
        parser.put_eof(ec);
        if (ec) return;  // a cut body: the client reports it
        continue;
      }
      pending.append(chunk, n);
    }
    std::size_t used = 0;
    const std::size_t got = tahua::parseInPlace(parser, pending.data(), pending.size(), used, failed);
    FUZZ_CHECK(got <= used && used <= pending.size());
    total += got;
    if (failed) return;
    pending.erase(0, used);
  }
  // 1xx, 204 and 304 answers have no body whatever their Content-Length says (RFC 9110);
  // the parser is right to read none.
  const unsigned status = parser.get().result_int();
  if (length && status / 100 != 1 && status != 204 && status != 304) FUZZ_CHECK(total == *length);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tahua::fuzz::Input in(data, size);
  const std::uint8_t control = in.byte();
  const std::size_t chunk = 1 + in.byte() % 64 * (control & 0x80 ? 64 : 1);
  FakeSocket socket(in.rest(), chunk);
  beast::flat_buffer buffer;
  if (control & 1) {
    readResponse(socket, buffer);
    return 0;
  }
  // The defaults, or small limits so inputs of fuzzing size reach them.
  const bool small = control & 2;
  const std::size_t header_limit = small ? 64 + (control >> 2) % 32 * 8 : 16 * 1024;
  const std::size_t body_limit = small ? (control >> 2) % 16 * 4 : 16 * 1024 * 1024;
  for (int i = 0; i < 8 && readRequest(socket, buffer, header_limit, body_limit); ++i) {
  }
  return 0;
}
