// Watches a client while the upstream works: a client that hangs up cancels the
// upstream at once instead of when the next write fails. A plain completion handler
// (no coroutine, no parallel group: those cost ~15% of proxy CPU) on a state object
// that outlives the session, since a cancelled peek may complete after it. The watch
// starts at the worker's next watch tick (SessionHost::watchSoon): a peek that finds
// nothing is a system call, ~6% of the CPU of a short request, which one answered
// before the tick never pays.
//
// Its own object (one per connection, owned by the session): the watch has state of its
// own and needs only the plain socket, so it is compiled once for both stream types.
#pragma once

#include <memory>

#include <boost/asio/ip/tcp.hpp>

namespace tahua {

class SessionBase;
class SessionHost;
class UpstreamExchange;

class ClientWatch {
 public:
  // `socket`: the connection's TCP socket (under TLS, the layer below it).
  ClientWatch(SessionHost& worker, SessionBase& session, boost::asio::ip::tcp::socket& socket)
      : worker_(worker), session_(session), socket_(socket) {}

  // A new request: a hang-up seen during an earlier one no longer counts.
  void reset() {
    if (w_) w_->gone = false;
  }
  // The exchange in flight (null between attempts). The first one starts watching; a
  // client already gone gets its exchange aborted at once.
  void follow(UpstreamExchange* exchange);
  // The watch tick: the request still waits for its upstream.
  void arm();
  // The request no longer waits for its upstream.
  void stop();
  // A hang-up was seen.
  bool gone() const { return w_ && w_->gone; }

 private:
  struct State {
    UpstreamExchange* exchange = nullptr;
    bool wanted = false;  // a request is watching (false once it ended)
    bool armed = false;   // a peek is pending
    bool gone = false;
    unsigned request = 0;  // which request the pending peek is for
    char peeked = 0;       // the peek's buffer: it must outlive the session
  };
  struct Handler;

  SessionHost& worker_;
  SessionBase& session_;
  boost::asio::ip::tcp::socket& socket_;
  std::shared_ptr<State> w_;
};

}  // namespace tahua
