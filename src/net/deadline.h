// The time limit of what a connection is doing now (reading a head, writing an answer,
// waiting for an upstream's first byte), kept by one timer per connection and re-armed
// lazily. Setting a limit only records when it falls due; the timer, when it wakes,
// sleeps again until the current due time or, past it, closes the socket, so that the
// pending operation fails at once (as Beast's tcp_stream does on a timeout). Beast armed
// and cancelled a timer around every read and write: several timer-queue updates and
// shared_ptr copies per request, for limits that almost never expire.
//
// Every phase sets its own limit (or never()): a limit left over from the last phase
// still applies, and would close a connection waiting for something else.
//
// In net/ (below server/ and the outbound HTTP client, net/http_client.h): the
// connections of both keep their limits with it.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>

namespace tahua {

class Deadline {
  using Clock = std::chrono::steady_clock;

 public:
  explicit Deadline(boost::asio::ip::tcp::socket& socket) : state_(std::make_shared<State>(socket)) {}
  ~Deadline() {
    state_->socket = nullptr;  // a handler already queued finds nothing to close
    state_->lookup = nullptr;
    state_->timer.cancel();
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

  // The socket to close moved (a plain connection wrapped in TLS).
  void watch(boost::asio::ip::tcp::socket& socket) { state_->socket = &socket; }
  // A name lookup (a new connection's first step) cancelled as well when the limit
  // passes; null when it is over. It must outlive the watch.
  void watchLookup(boost::asio::ip::tcp::resolver* lookup) { state_->lookup = lookup; }

  void after(std::chrono::milliseconds limit) { at(Clock::now() + limit); }
  void at(Clock::time_point due) {
    state_->due = due;
    state_->expired = false;
    // Only a limit earlier than the one the timer waits for needs the timer now.
    if (due < state_->waiting_until) State::arm(state_);
  }
  void never() {
    state_->due = Clock::time_point::max();
    state_->expired = false;
  }
  // The socket was closed because the limit passed (the failed operation's error code
  // says only "aborted").
  bool expired() const { return state_->expired; }
  Clock::time_point due() const { return state_->due; }

 private:
  // Shared with the timer's handler, which may run after the owner is gone.
  struct State {
    explicit State(boost::asio::ip::tcp::socket& s) : timer(s.get_executor()), socket(&s) {}
    boost::asio::steady_timer timer;
    boost::asio::ip::tcp::socket* socket;
    boost::asio::ip::tcp::resolver* lookup = nullptr;
    Clock::time_point due = Clock::time_point::max();
    Clock::time_point waiting_until = Clock::time_point::max();  // max: not waiting
    bool expired = false;

    static void arm(const std::shared_ptr<State>& self) {
      self->waiting_until = self->due;
      self->timer.expires_at(self->due);  // cancels an earlier wait (its handler returns at once)
      self->timer.async_wait([self](const boost::system::error_code& ec) {
        if (ec == boost::asio::error::operation_aborted) return;  // re-armed or stopped
        self->waiting_until = Clock::time_point::max();
        if (!self->socket || self->due == Clock::time_point::max()) return;
        if (Clock::now() < self->due) {
          arm(self);
          return;
        }
        self->expired = true;
        if (self->lookup) self->lookup->cancel();
        boost::system::error_code ignored;
        self->socket->close(ignored);
      });
    }
  };
  std::shared_ptr<State> state_;
};

}  // namespace tahua
