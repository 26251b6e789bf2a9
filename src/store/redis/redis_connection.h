// One connection to a Redis server, on one io_context (a worker's, or the store's
// control thread): commands are pipelined (written as they come, answered in order),
// replies parsed by hiredis' reader, every command bounded by the command timeout, and
// a broken connection is reopened after a backoff. While it is down or backing off, a
// command fails at once (the caller falls back; nothing waits on a dead server).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <initializer_list>
#include <optional>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "core/duration.h"
#include "core/redis_url.h"
#include "store/redis/resp.h"

struct redisReader;

namespace tahua {



class RedisConnection : public std::enable_shared_from_this<RedisConnection> {
 public:
  // The reply, or nullopt when the connection failed, timed out or is down.
  using Callback = std::function<void(std::optional<RedisReply>)>;

  RedisConnection(boost::asio::io_context& io, RedisEndpoint endpoint, Millis command_timeout);
  ~RedisConnection();

  // On the connection's io_context thread. Connects first if needed. Commands sent in
  // one turn of the event loop leave in one write.
  void send(std::span<const std::string_view> args, Callback cb);
  void send(std::initializer_list<std::string_view> args, Callback cb) {
    send(std::span<const std::string_view>(args.begin(), args.size()), std::move(cb));
  }
  void send(const std::vector<std::string>& args, Callback cb) {
    std::vector<std::string_view> views(args.begin(), args.end());
    send(std::span<const std::string_view>(views), std::move(cb));
  }
  // A command already in RESP (formatCommand): the cluster client formats once and
  // sends the same bytes again when a node redirects it.
  void sendFormatted(std::string_view resp, Callback cb);
  static void formatCommand(std::string& out, std::span<const std::string_view> args);
  // Commands sent first on every new connection, after AUTH and SELECT (SCRIPT LOAD):
  // a refusal closes the connection.
  void onEveryConnect(std::vector<std::vector<std::string>> commands) { handshake_ = std::move(commands); }
  // Up: connected, or not yet tried / backoff over (a command would be sent).
  bool usable() const;
  // Connected now (a subscriber checks it to know whether it still receives).
  bool up() const { return state_ == State::Up; }
  void close();
  // Why the last failure happened ("cannot connect", "command timeout", ...).
  const char* lastError() const { return last_error_; }

  // For a subscriber: every reply that does not answer a command (pushed messages).
  void onPush(std::function<void(const RedisReply&)> fn) { on_push_ = std::move(fn); }
  // Called when the connection fails (a subscriber that stops hearing must say so at once).
  void onDown(std::function<void()> fn) { on_down_ = std::move(fn); }
  // Where to connect, asked at every (re)connect: with Sentinel, the master it names now.
  void onConnect(std::function<RedisEndpoint()> where) { where_ = std::move(where); }

 private:
  struct Pending {
    Callback cb;
    std::chrono::steady_clock::time_point deadline;
  };
  void queued(Callback cb);  // the command is in out_: wait for its reply, write soon
  void connect();
  void startRead();
  void flush();
  void armTimer();
  void fail(const char* why);

  boost::asio::io_context& io_;
  RedisEndpoint endpoint_;
  Millis timeout_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  enum class State { Down, Connecting, Up } state_ = State::Down;
  std::chrono::steady_clock::time_point retry_at_{};
  Millis backoff_{100};
  std::deque<Pending> pending_;  // sent or queued, in order
  std::string out_;              // formatted commands not yet written
  std::string writing_;          // the buffer of the write in flight
  bool write_in_flight_ = false;
  bool timer_armed_ = false;
  std::vector<char> in_;
  redisReader* reader_ = nullptr;
  std::function<void(const RedisReply&)> on_push_;
  std::function<void()> on_down_;
  std::function<RedisEndpoint()> where_;
  std::vector<std::vector<std::string>> handshake_;
  bool flush_posted_ = false;
  unsigned generation_ = 0;
  const char* last_error_ = "";  // bumps when the socket is replaced: stale handlers do nothing
};


}  // namespace tahua
