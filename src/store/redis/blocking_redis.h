// A blocking connection to one Redis server, for background threads that talk to Redis
// at their own pace (the usage records' stream sink, the region link): connects on first
// use (AUTH, SELECT), every command bounded by the timeout; a failure drops the
// connection and the next call connects again. Never on a worker.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/duration.h"
#include "core/redis_url.h"
#include "store/redis/resp.h"

struct redisContext;

namespace tahua {

class BlockingRedis {
 public:
  BlockingRedis(RedisEndpoint endpoint, Millis timeout) : ep_(std::move(endpoint)), timeout_(timeout) {}
  ~BlockingRedis() { close(); }
  BlockingRedis(const BlockingRedis&) = delete;
  BlockingRedis& operator=(const BlockingRedis&) = delete;

  // The reply (an error reply too), or nullopt and `error` when the server could not be
  // asked.
  std::optional<RedisReply> call(const std::vector<std::string>& args, std::string& error);
  // `count` commands already in RESP (resp.h), sent in one write; their replies in order,
  // or nullopt and `error` when the connection failed on the way.
  std::optional<std::vector<RedisReply>> pipeline(const std::string& resp, std::size_t count, std::string& error);
  // The same for commands whose replies only say whether they worked (a batch of XADDs):
  // nothing is copied out of them. False and `error` (the first error reply's text) when
  // one failed or the connection did; every reply is read either way.
  bool pipelineChecked(const std::string& resp, std::size_t count, std::string& error);
  // The same, the commands given as pieces written in order (writev): a batch of XADDs
  // sends its records from where they are, with no copy into one buffer.
  bool pipelineChecked(std::span<const std::string_view> pieces, std::size_t count, std::string& error);
  void close();
  bool connected() const { return c_ != nullptr; }

 private:
  bool connect(std::string& error);
  bool dropped(std::string& error);  // takes the context's error, closes; false
  // Writes `pieces` on the connection, all of them (hiredis' own buffer stays empty, so
  // its reader only reads the replies); false and `error` (closed) when it cannot.
  bool send(std::span<const std::string_view> pieces, std::string& error);

  RedisEndpoint ep_;
  Millis timeout_;
  redisContext* c_ = nullptr;
};

}  // namespace tahua
