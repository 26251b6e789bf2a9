// One request/response exchange with an upstream, seen from the proxy loop. The loop
// does not know whether the upstream is a pooled HTTP(S) connection or the in-process
// mock: both implement this interface.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tahua {

// Header views into storage owned by the exchange (valid until it is destroyed).
using HeaderViews = std::vector<std::pair<std::string_view, std::string_view>>;

// A body sent partly from a file (an upload's spool, request/upload.h): each piece is
// text from memory, then a range of the file. Never read into memory whole: the
// transport hands the ranges to the socket (sendfile) or reads them 64 KiB at a time.
struct SpooledBody {
  struct Piece {
    std::string text;
    std::uint64_t offset = 0;  // then this range of the file
    std::uint64_t length = 0;
  };
  int fd = -1;  // owned by the upload, which outlives every attempt
  std::vector<Piece> pieces;
  std::uint64_t size() const {
    std::uint64_t n = 0;
    for (const auto& p : pieces) n += p.text.size() + p.length;
    return n;
  }
};

// What the adapter asks the transport to send.
struct UpstreamRequest {
  std::string method = "POST";
  std::string path;  // origin-form target, e.g. /v1/chat/completions
  // Header lines "Name: value\r\n" (the transport adds Host, User-Agent and
  // Content-Length). One string, not a list: no allocation per header.
  std::string header_lines;
  std::string body;
  // Instead of `body`, when set: an upload's multipart body around its spooled files.
  std::optional<SpooledBody> spooled;
  // The client asked for a stream: the transport keeps its read buffer small (a held
  // stream's memory), otherwise it reads a whole typical answer in one system call.
  bool expect_stream = false;
  // The adapter asked an OpenAI-format upstream for stream usage the client did not
  // request: the usage-only chunk is metered, then cut from the client's stream.
  bool hide_stream_usage = false;

  void addHeader(std::string_view name, std::string_view value) {
    header_lines.append(name).append(": ").append(value).append("\r\n");
  }
};

struct ResponseHead {
  int status = 0;
  bool event_stream = false;  // Content-Type: text/event-stream
  // Set by the translator: a body relayed as it comes without being events (audio, a
  // file's content): chunked, no heartbeats, and a failure cuts the connection.
  bool raw_stream = false;
  std::string_view content_type;
  HeaderViews headers;  // end-to-end headers to pass to the client (hop-by-hop removed)
};

class UpstreamExchange {
 public:
  virtual ~UpstreamExchange() = default;
  // Sends the request and waits for the response head. An error here means nothing
  // reached the client yet.
  virtual boost::asio::awaitable<std::optional<Error>> start(ResponseHead& head) = 0;
  // Next piece of the response body. `bytes` stays valid until the next call; `done`
  // is set with the last piece (which may be empty).
  virtual boost::asio::awaitable<std::optional<Error>> read(std::string_view& bytes, bool& done) = 0;
  // Body bytes came with the response head: the first read() returns without waiting
  // (the relay then writes the head together with them).
  virtual bool bodyBuffered() const { return false; }
  // The response head has been relayed: the exchange may free it (a held stream's
  // memory). The views of the ResponseHead die here.
  virtual void releaseHead() {}
  // Stops the exchange now (client gone, drain deadline): pending start/read complete
  // with an error and the connection is closed, never returned to a pool.
  virtual void abort() noexcept = 0;
};

}  // namespace tahua
