// The client side of a relayed stream: chunk framing, write coalescing, heartbeats and
// the backlog a slow client builds up. Bytes go out at once when the socket takes them
// (plain TCP: a non-blocking send, no copy, no trip through the reactor); what it does
// not take is copied to a backlog and written asynchronously, and whatever comes
// meanwhile waits in a second buffer, to go out as one write. One write in flight at a
// time. The relay reads the backlog size to bound it (server.stream_buffer_bytes).
//
// Included by the session only (it is a template over the session's stream type, plain
// TCP or TLS, and pulls in Asio).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "core/duration.h"
#include "net/deadline.h"
#include "server/http_head.h"

namespace tahua {

// What the writer needs from its connection.
class StreamWriterOwner {
 public:
  virtual bool clientGone() const = 0;
  // A write failed (the client reset, or did not read for client_write_timeout).
  virtual void streamWriteFailed() = 0;

 protected:
  ~StreamWriterOwner() = default;
};

template <class Stream>
class StreamWriter {
  using Clock = std::chrono::steady_clock;
  static constexpr bool kTls = !std::is_same_v<Stream, boost::asio::ip::tcp::socket>;

 public:
  StreamWriter(Stream& stream, Deadline& deadline, StreamWriterOwner& owner)
      : stream_(stream), deadline_(deadline), owner_(owner) {}

  // A stream begins (its head is written). `http10`: no chunked encoding, the body is
  // unframed and ends with the connection.
  void begin(bool http10, Millis write_timeout) {
    http10_ = http10;
    write_timeout_ = write_timeout;
    if constexpr (!kTls) {
      // Direct writes need a socket that never blocks; Asio's own async operations work
      // the same either way. Set once per connection.
      if (!direct_writes_) {
        boost::system::error_code ec;
        lowest().non_blocking(true, ec);
        direct_writes_ = !ec;
      }
    }
    active_ = true;
    last_write_ = Clock::now();
  }

  // The response head, to go out with the first piece of the stream in one write (the
  // relay holds it back only when that piece is already at hand; it must stay valid
  // until sent). sendHead() writes it alone if the first piece had nothing to send.
  void holdHead(std::string_view head) { held_head_ = head; }
  bool holdingHead() const { return !held_head_.empty(); }
  bool sendHead() { return send({}); }

  // One chunk (nothing if `data` is empty), then the terminating chunk if `last`. False
  // once the client is gone.
  bool sendChunk(std::string_view data, bool last) {
    static constexpr std::string_view kCrlf = "\r\n";
    static constexpr std::string_view kLast = "0\r\n\r\n";
    char size_buf[20];
    std::array<boost::asio::const_buffer, 4> bufs;
    std::size_t n = 0;
    if (http10_) {
      if (!data.empty()) bufs[n++] = boost::asio::buffer(data.data(), data.size());
    } else {
      if (!data.empty()) {
        std::string_view size_line = chunkSizeLine(data.size(), size_buf);
        bufs[n++] = boost::asio::buffer(size_line.data(), size_line.size());
        bufs[n++] = boost::asio::buffer(data.data(), data.size());
        bufs[n++] = boost::asio::buffer(kCrlf.data(), kCrlf.size());
      }
      if (last) bufs[n++] = boost::asio::buffer(kLast.data(), kLast.size());
    }
    if (n == 0 && held_head_.empty()) return !owner_.clientGone();
    last_write_ = Clock::now();
    return send(std::span<const boost::asio::const_buffer>(bufs.data(), n));
  }

  // Idle streams get an SSE comment now and then, so proxies and load balancers in
  // between do not cut them. Only when nothing is being written: never between the
  // pieces of an event, never queued behind a backlog (a write in flight is already a
  // sign of life).
  void heartbeat(Clock::time_point now, Millis interval) {
    if (!active_ || busy_ || owner_.clientGone()) return;
    if (interval.count() == 0 || now - last_write_ < interval) return;
    static constexpr std::string_view kChunked = "e\r\n: keep-alive\n\n\r\n";
    static constexpr std::string_view kPlain = ": keep-alive\n\n";  // HTTP/1.0: unframed
    const std::string_view bytes = http10_ ? kPlain : kChunked;
    last_write_ = now;
    const boost::asio::const_buffer buf(bytes.data(), bytes.size());
    send(std::span<const boost::asio::const_buffer>(&buf, 1));
  }

  // A stream is being relayed (between begin() and end()).
  bool active() const { return active_; }
  // Bytes accepted but not yet taken by the client's socket.
  std::size_t backlog() const { return inflight_.size() + pending_.size(); }
  Clock::time_point lastWrite() const { return last_write_; }

  // Waits until everything queued is written, or the write failed. A client known to
  // be gone is not waited for: its write is cancelled. No write of a stream may outlive
  // its relay (the write's handler uses `this`).
  boost::asio::awaitable<void> flush() {
    while (busy_) {
      if (owner_.clientGone()) {
        boost::system::error_code ignored;
        lowest().cancel(ignored);
      }
      if (!idle_) idle_.emplace(lowest().get_executor());  // made lazily: rarely needed
      idle_->expires_at(Clock::time_point::max());
      co_await idle_->async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));  // cancelled when idle
    }
  }

  // The stream ended (after flush): no more heartbeats, and a slow client's large
  // backlog is not kept for the next request.
  void end() {
    active_ = false;
    held_head_ = {};  // never sent (the client left first): it must not outlive the stream
    if (inflight_.capacity() + pending_.capacity() > 64 * 1024) {
      std::string().swap(inflight_);
      std::string().swap(pending_);
    }
  }

 private:
  boost::asio::ip::tcp::socket& lowest() {
    if constexpr (kTls) return stream_.next_layer();
    else return stream_;
  }

  bool send(std::span<const boost::asio::const_buffer> bufs) {
    if (owner_.clientGone()) return false;
    std::array<boost::asio::const_buffer, 8> with_head;
    if (!held_head_.empty()) {
      with_head[0] = boost::asio::buffer(held_head_.data(), held_head_.size());
      const std::size_t n = std::min(bufs.size(), with_head.size() - 1);
      std::copy_n(bufs.begin(), n, with_head.begin() + 1);
      bufs = std::span<const boost::asio::const_buffer>(with_head.data(), n + 1);
      held_head_ = {};
    }
    if (bufs.empty()) return true;
    if (busy_) {
      append(pending_, bufs, 0);
      return true;
    }
    std::size_t written = 0;
    if constexpr (!kTls) {
      if (direct_writes_) {
        boost::system::error_code ec;
        written = lowest().write_some(bufs, ec);
        if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) {
          ec = {};
          written = 0;
        }
        if (ec) {
          fail();
          return false;
        }
        if (written == boost::asio::buffer_size(bufs)) return true;
      }
    }
    append(inflight_, bufs, written);
    startWrite();
    return true;
  }

  static void append(std::string& to, std::span<const boost::asio::const_buffer> bufs, std::size_t skip) {
    for (const auto& b : bufs) {
      const char* p = static_cast<const char*>(b.data());
      std::size_t size = b.size();
      const std::size_t drop = std::min(skip, size);
      skip -= drop;
      to.append(p + drop, size - drop);
    }
  }

  void startWrite() {
    busy_ = true;
    deadline_.after(write_timeout_);
    // The relay waits for the writer before it ends (flush), so `this` outlives it.
    boost::asio::async_write(stream_, boost::asio::buffer(inflight_), [this](boost::system::error_code ec, std::size_t) {
      inflight_.clear();
      if (ec || owner_.clientGone()) {
        busy_ = false;
        fail();
        return;
      }
      if (!pending_.empty()) {
        inflight_.swap(pending_);
        startWrite();
        return;
      }
      busy_ = false;
      deadline_.never();  // the relay waits for the upstream again
      last_write_ = Clock::now();
      if (idle_) idle_->cancel();
    });
  }

  // A write failed: what is queued is dropped, a flush is woken, the owner is told.
  void fail() {
    pending_.clear();
    if (idle_) idle_->cancel();
    owner_.streamWriteFailed();
  }

  Stream& stream_;
  Deadline& deadline_;  // the connection's (it bounds a write of the backlog)
  StreamWriterOwner& owner_;
  std::string_view held_head_;  // the response head, sent with the first piece
  bool http10_ = false;
  bool active_ = false;          // a stream is being relayed (heartbeats allowed)
  bool direct_writes_ = false;   // plain TCP socket set non-blocking
  bool busy_ = false;            // an async write of inflight_ is in flight
  Millis write_timeout_{60'000};
  Clock::time_point last_write_{};
  std::string inflight_;
  std::string pending_;
  std::optional<boost::asio::steady_timer> idle_;
};

}  // namespace tahua
