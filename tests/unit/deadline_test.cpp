// Deadline (src/net/deadline.h): one lazily re-armed timer per connection. Each test
// runs a real loopback socket pair on one io_context; a pending read on one end fails
// when the deadline closes it, or completes when the peer writes first. Event order on
// one io_context decides, not wall-clock luck: a limit moved past a peer's write never
// fires before that write, and a failing test is bounded by run_for, never hangs.
#include "net/deadline.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>

namespace tahua {
namespace deadline_test {  // named, not anonymous: eight test files compile as one unit

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

struct SocketPair {
  asio::io_context io;
  tcp::socket a{io};
  tcp::socket b{io};

  SocketPair() {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    a.connect(acceptor.local_endpoint());
    acceptor.accept(b);
  }

  // Starts a read on `a`; its result lands in `result`.
  void readOnA(std::optional<boost::system::error_code>& result) {
    a.async_read_some(asio::buffer(buf), [&result](boost::system::error_code ec, std::size_t) { result = ec; });
  }

  // The peer writes one byte after `delay`.
  void peerWritesAfter(std::chrono::milliseconds delay) {
    peer_timer.expires_after(delay);
    peer_timer.async_wait([this](boost::system::error_code ec) {
      if (!ec) asio::write(b, asio::buffer("x", 1));
    });
  }

  // Runs until the read finished (bounded: a broken deadline fails the test, not hangs it).
  void runUntil(const std::optional<boost::system::error_code>& result) {
    const auto limit = std::chrono::steady_clock::now() + 10s;
    while (!result && std::chrono::steady_clock::now() < limit) io.run_one_for(100ms);
  }

  char buf[16];
  asio::steady_timer peer_timer{io};
};

TEST(Deadline, ClosesTheSocketWhenItsLimitPasses) {
  SocketPair p;
  Deadline d(p.a);
  d.after(20ms);
  std::optional<boost::system::error_code> read;
  p.readOnA(read);
  p.runUntil(read);
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(*read) << "the pending read fails";
  EXPECT_TRUE(d.expired());
  EXPECT_FALSE(p.a.is_open());
}

TEST(Deadline, ALaterLimitSetMeanwhileKeepsTheConnection) {
  SocketPair p;
  Deadline d(p.a);
  d.after(20ms);  // the timer is armed for this one...
  d.after(5s);    // ...and finds this one when it wakes
  p.peerWritesAfter(60ms);
  std::optional<boost::system::error_code> read;
  p.readOnA(read);
  p.runUntil(read);
  ASSERT_TRUE(read.has_value());
  EXPECT_FALSE(*read) << read->message();
  EXPECT_FALSE(d.expired());
  EXPECT_TRUE(p.a.is_open());
}

TEST(Deadline, NeverLiftsTheLimit) {
  SocketPair p;
  Deadline d(p.a);
  d.after(20ms);
  d.never();
  p.peerWritesAfter(60ms);
  std::optional<boost::system::error_code> read;
  p.readOnA(read);
  p.runUntil(read);
  ASSERT_TRUE(read.has_value());
  EXPECT_FALSE(*read) << read->message();
  EXPECT_FALSE(d.expired());
}

TEST(Deadline, AnEarlierLimitReArmsTheTimer) {
  SocketPair p;
  Deadline d(p.a);
  d.after(60s);   // armed for a minute
  d.after(20ms);  // earlier: must not wait for the minute
  std::optional<boost::system::error_code> read;
  p.readOnA(read);
  p.runUntil(read);
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(*read);
  EXPECT_TRUE(d.expired());
}

TEST(Deadline, ANewLimitClearsExpired) {
  SocketPair p;
  Deadline d(p.a);
  d.after(10ms);
  std::optional<boost::system::error_code> read;
  p.readOnA(read);
  p.runUntil(read);
  ASSERT_TRUE(d.expired());
  d.after(1s);
  EXPECT_FALSE(d.expired());
}

TEST(Deadline, GoneBeforeItsLimitLeavesTheSocketAlone) {
  SocketPair p;
  {
    Deadline d(p.a);
    d.after(10ms);
  }
  // The read completes when the peer writes, well after the destroyed deadline's limit.
  p.peerWritesAfter(60ms);
  std::optional<boost::system::error_code> read;
  p.readOnA(read);
  p.runUntil(read);
  ASSERT_TRUE(read.has_value());
  EXPECT_FALSE(*read) << read->message();
  EXPECT_TRUE(p.a.is_open());
}

}  // namespace deadline_test
}  // namespace tahua
