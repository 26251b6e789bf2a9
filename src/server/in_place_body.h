// Response bodies parsed where they were read (Beast's parser, eager): used by the
// upstream client (src/server/upstream_client.cpp) and by the fuzz target that checks its
// parsing (fuzz/http_head.cpp). Beast-dependent: include only there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/optional.hpp>

namespace tahua {

// A response body parsed where it was read: the parser moves each piece of body to the
// front of the buffer it parses (dropping the chunk framing between), so the body of a
// read is one contiguous view, with no copy into a second buffer. The output never
// overtakes the input: every body byte written was consumed from at or after it.
struct InPlaceBody {
  struct value_type {
    char* out = nullptr;
    std::size_t size = 0;
  };
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>&, boost::beast::error_code& ec) { ec = {}; }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      std::size_t n = 0;
      for (const boost::asio::const_buffer b : boost::beast::buffers_range_ref(buffers)) {
        std::memmove(body_.out + body_.size, b.data(), b.size());
        body_.size += b.size();
        n += b.size();
      }
      ec = {};
      return n;
    }
    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

// Parses [data, data + size) with `parser` (its body an InPlaceBody), moving the body
// to the front of it. Returns the body bytes now at `data`; `used` is the input consumed
// (the rest is an element the read cut: keep it for the next read). A malformed body
// sets `failed`; what was parsed before it is still returned.
template <class Parser>
std::size_t parseInPlace(Parser& parser, char* data, std::size_t size, std::size_t& used, bool& failed) {
  auto& body = parser.get().body();
  body.out = data;
  body.size = 0;
  used = 0;
  while (used < size && !parser.is_done()) {
    boost::beast::error_code ec;
    const std::size_t n = parser.put(boost::asio::const_buffer(data + used, size - used), ec);
    used += n;
    if (ec == boost::beast::http::error::need_more) break;
    if (ec) {
      failed = true;
      break;
    }
    if (n == 0) break;
  }
  return body.size;
}

}  // namespace tahua
