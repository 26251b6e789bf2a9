// What the Redis store sends its commands through, on one io_context: either one server
// (standalone, or the master Sentinel names) or a Redis Cluster.
//
// In a cluster every command goes to the master of its key's hash slot, over one
// pipelined connection per master. The slot map is asked with CLUSTER SLOTS (at the
// first command, after a MOVED, after a node fails); until a slot is known its commands
// go to a seed and follow the redirection. MOVED updates the map and resends the same
// bytes; ASK resends them once to the importing node after ASKING, without touching the
// map. At most five redirections per command, then it fails (the caller falls back, as
// for a timeout). Keys of one command must share a slot: the store's counter names carry
// hash tags (limits/limit_plan.h) and the store splits a request's checks by slot.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/redis/redis_connection.h"

namespace tahua {

class RedisClient : public std::enable_shared_from_this<RedisClient> {
 public:
  using Callback = RedisConnection::Callback;
  using Factory = std::function<std::shared_ptr<RedisConnection>(const RedisEndpoint&)>;

  // One server: every command on `conn`.
  explicit RedisClient(std::shared_ptr<RedisConnection> conn);
  // A cluster, first known through `seeds` (their password and user are every node's);
  // `make` opens a connection to a node.
  RedisClient(std::vector<RedisEndpoint> seeds, Factory make);

  // Routed by the command's key (the first key of EVAL/EVALSHA, else the first
  // argument; none for PUBLISH, CONFIG, SCRIPT, CLUSTER, PING: any node).
  void send(std::span<const std::string_view> args, Callback cb);
  void send(std::initializer_list<std::string_view> args, Callback cb) {
    send(std::span<const std::string_view>(args.begin(), args.size()), std::move(cb));
  }
  void send(const std::vector<std::string>& args, Callback cb) {
    std::vector<std::string_view> views(args.begin(), args.end());
    send(std::span<const std::string_view>(views), std::move(cb));
  }

  bool cluster() const { return !single_; }
  // A command would be sent (some node is connected or may be tried).
  bool usable() const;
  const char* lastError() const;
  void close();

  // Cluster: the slot of `key`, to split the checks of one request (0 for one server).
  std::uint16_t slotOf(std::string_view key) const;
  // Cluster: asks the slot map now; `done(true)` once a node answered it.
  void refreshSlots(std::function<void(bool)> done);
  // The masters (cluster, once the map is known) or the one server, for the start
  // probe: their addresses, and a command sent to one of them.
  std::vector<std::string> nodes() const;
  void sendToNode(std::size_t node, std::initializer_list<std::string_view> args, Callback cb);

 private:
  struct Node {
    std::string address;  // host:port
    std::shared_ptr<RedisConnection> conn;
    bool master = false;  // named by the last slot map
  };
  static constexpr std::uint16_t kUnknown = 0xFFFF;
  static constexpr int kMaxRedirects = 5;

  std::size_t nodeAt(const std::string& host, std::uint16_t port);
  void dispatch(std::uint16_t slot, bool keyed, std::shared_ptr<const std::string> cmd, Callback cb, int hops,
                std::size_t ask_node);
  void refreshSoon();
  void askSlots(std::size_t first, std::size_t tried, std::function<void(bool)> done);
  bool applySlots(const RedisReply& r, std::size_t from);

  std::shared_ptr<RedisConnection> single_;
  RedisEndpoint base_;
  Factory make_;
  std::vector<Node> nodes_;
  std::unique_ptr<std::array<std::uint16_t, 16384>> slots_;  // slot -> index in nodes_
  std::size_t next_any_ = 0;                                 // round robin for keyless commands
  bool refreshing_ = false;
  std::chrono::steady_clock::time_point last_refresh_{};
  const char* last_error_ = "";
};

}  // namespace tahua
