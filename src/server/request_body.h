// The body type of every request the session reads (a Beast Body): the bytes kept in
// memory (a JSON body, read whole before the filters run), or, once the session gave it
// a sink after the head (an upload, read after the header filters ran), every byte
// handed to the sink as it is parsed and nothing kept. One type for both, so the
// message and its header views stay where they are when an upload's body is read.
//
// Included by the session only (it pulls in Beast).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>

namespace tahua {

// Takes an upload's bytes as they are parsed; false stops the read (ctx says why).
class BodySink {
 public:
  virtual bool write(std::string_view bytes) = 0;

 protected:
  ~BodySink() = default;
};

struct RequestBody {
  struct value_type {
    std::string text;
    BodySink* sink = nullptr;
  };

  static std::uint64_t size(const value_type& v) { return v.text.size(); }

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>& length, boost::beast::error_code& ec) {
      ec = {};
      // Room for a declared body, plus simdjson's padding: one allocation.
      if (!body_.sink && length && *length < body_.text.max_size() - 64)
        body_.text.reserve(static_cast<std::size_t>(*length) + 64);
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      ec = {};
      std::size_t n = 0;
      for (const auto b : boost::beast::buffers_range_ref(buffers)) {
        const std::string_view bytes(static_cast<const char*>(b.data()), b.size());
        if (body_.sink) {
          if (!body_.sink->write(bytes)) {
            ec = boost::beast::http::error::bad_chunk;  // any error: the session reads why from the sink
            return n;
          }
        } else {
          body_.text.append(bytes);
        }
        n += bytes.size();
      }
      return n;
    }

    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

}  // namespace tahua
