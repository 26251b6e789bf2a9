// A byte stream whose type is erased: a TCP socket or a TLS stream over one (owned, or a
// reference to the session's) behind one interface, for Beast's WebSocket to run over.
// The Realtime relay (realtime_relay.cpp) has a plain or TLS client and a plain or TLS
// provider: with the stream types as template arguments Beast's WebSocket and the relay
// were compiled four times (a minute and a half, the build's longest unit); over this
// they are compiled once. One virtual call per read or write is nothing next to a frame.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/system/error_code.hpp>

namespace tahua {

class AnyStream {
 public:
  using executor_type = boost::asio::any_io_executor;
  using IoHandler = boost::asio::any_completion_handler<void(boost::system::error_code, std::size_t)>;
  using DoneHandler = boost::asio::any_completion_handler<void(boost::system::error_code)>;
  // The buffers of one write, at most 8 (a WebSocket frame is a header and a payload):
  // a buffer sequence the stream's operation copies.
  struct Gather {
    std::array<boost::asio::const_buffer, 8> buffers;
    std::size_t count = 0;
    const boost::asio::const_buffer* begin() const { return buffers.data(); }
    const boost::asio::const_buffer* end() const { return buffers.data() + count; }
  };

  class Impl {
   public:
    virtual ~Impl() = default;
    virtual executor_type executor() = 0;
    virtual void readSome(boost::asio::mutable_buffer into, IoHandler done) = 0;
    virtual void writeSome(const Gather& from, IoHandler done) = 0;
    // The end of a WebSocket session: TLS's close_notify, or TCP's FIN.
    virtual void shutdown(DoneHandler done) = 0;
    virtual boost::asio::ip::tcp::socket& socket() = 0;
  };

  explicit AnyStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

  executor_type get_executor() { return impl_->executor(); }
  boost::asio::ip::tcp::socket& socket() { return impl_->socket(); }
  Impl& impl() { return *impl_; }

  // A read may take fewer bytes than offered: the first non-empty buffer is enough.
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    boost::asio::mutable_buffer first;
    for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers); ++it) {
      const boost::asio::mutable_buffer b(*it);
      if (b.size() > 0) {
        first = b;
        break;
      }
    }
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [](auto handler, Impl* impl, boost::asio::mutable_buffer b) { impl->readSome(b, IoHandler(std::move(handler))); },
        token, impl_.get(), first);
  }

  // A write may take fewer bytes too: the first 8 non-empty buffers.
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    Gather g;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && g.count < g.buffers.size(); ++it) {
      const boost::asio::const_buffer b(*it);
      if (b.size() > 0) g.buffers[g.count++] = b;
    }
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [](auto handler, Impl* impl, const Gather& from) { impl->writeSome(from, IoHandler(std::move(handler))); }, token,
        impl_.get(), g);
  }

  // Beast closes the lowest layer of a WebSocket whose operation failed or timed out.
  friend void beast_close_socket(AnyStream& s) {
    boost::system::error_code ignored;
    s.socket().close(ignored);
  }

  // Beast's WebSocket ends its session through this (found by argument-dependent lookup).
  template <class Handler>
  friend void async_teardown(boost::beast::role_type, AnyStream& s, Handler&& handler) {
    s.impl_->shutdown(DoneHandler(std::forward<Handler>(handler)));
  }

 private:
  std::unique_ptr<Impl> impl_;
};

// `S`: tcp::socket, asio::ssl::stream<tcp::socket>, or a reference to one of them.
template <class S>
class StreamOf final : public AnyStream::Impl {
  using Plain = std::remove_reference_t<S>;
  static constexpr bool kTls = !std::is_same_v<Plain, boost::asio::ip::tcp::socket>;

 public:
  template <class... Args>
  explicit StreamOf(Args&&... args) : s_(std::forward<Args>(args)...) {}

  AnyStream::executor_type executor() override { return s_.get_executor(); }
  void readSome(boost::asio::mutable_buffer into, AnyStream::IoHandler done) override {
    s_.async_read_some(into, std::move(done));
  }
  void writeSome(const AnyStream::Gather& from, AnyStream::IoHandler done) override {
    s_.async_write_some(from, std::move(done));
  }
  void shutdown(AnyStream::DoneHandler done) override {
    if constexpr (kTls) {
      s_.async_shutdown(std::move(done));
    } else {
      boost::system::error_code ec;
      s_.shutdown(boost::asio::ip::tcp::socket::shutdown_send, ec);
      boost::asio::post(s_.get_executor(), [done = std::move(done), ec]() mutable { std::move(done)(ec); });
    }
  }
  boost::asio::ip::tcp::socket& socket() override {
    if constexpr (kTls) return s_.next_layer();
    else return s_;
  }

 private:
  S s_;
};

template <class S, class... Args>
AnyStream anyStream(Args&&... args) {
  return AnyStream(std::make_unique<StreamOf<S>>(std::forward<Args>(args)...));
}

}  // namespace tahua
