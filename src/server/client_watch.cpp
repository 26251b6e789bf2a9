#include "server/client_watch.h"

#include <boost/asio/buffer.hpp>

#include "providers/exchange.h"
#include "server/session_host.h"

namespace tahua {

// A peek (MSG_PEEK) of one byte: Asio tries it at once only when the socket may hold
// data, and otherwise queues it in the reactor without a system call (a plain
// readiness wait re-registers the socket with epoll every time).
struct ClientWatch::Handler {
  std::shared_ptr<State> w;
  unsigned request;
  void operator()(boost::system::error_code ec, std::size_t n) {
    // The session may be gone: touch nothing but `w`. A peek of an earlier request
    // (cancelled when it ended) says nothing about this one.
    if (w->request != request) return;
    w->armed = false;
    if (!w->wanted) return;
    w->wanted = false;
    if (!ec && n > 0) return;  // a pipelined next request (or a TLS record): it stays in the socket
    w->gone = true;            // end of stream, reset, or the socket closed under us
    if (w->exchange) w->exchange->abort();  // null while waiting between retries
  }
};

void ClientWatch::follow(UpstreamExchange* exchange) {
  if (!w_) w_ = std::make_shared<State>();
  if (w_->gone) {
    if (exchange) exchange->abort();
    return;
  }
  w_->exchange = exchange;
  if (!w_->wanted && exchange) {
    w_->wanted = true;
    ++w_->request;
    worker_.watchSoon(&session_);
  }
}

void ClientWatch::arm() {
  if (!w_ || !w_->wanted || w_->armed) return;
  w_->armed = true;
  socket_.async_receive(boost::asio::buffer(&w_->peeked, 1), boost::asio::ip::tcp::socket::message_peek,
                        Handler{w_, w_->request});
}

void ClientWatch::stop() {
  if (!w_ || !w_->wanted) return;
  w_->wanted = false;
  worker_.watchSoonCancel(&session_);
  if (!w_->armed) return;
  w_->armed = false;  // its handler, for an ended request, will do nothing
  boost::system::error_code ignored;
  socket_.cancel(ignored);  // nothing else is pending on the socket now
}

}  // namespace tahua
