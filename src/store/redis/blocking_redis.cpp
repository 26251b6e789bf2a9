#include "store/redis/blocking_redis.h"

#include <hiredis/hiredis.h>

namespace tahua {

void BlockingRedis::close() {
  if (c_) redisFree(c_);
  c_ = nullptr;
}

bool BlockingRedis::dropped(std::string& error) {
  error = c_ && c_->err ? std::string(c_->errstr) : std::string("cannot connect");
  close();
  return false;
}

bool BlockingRedis::connect(std::string& error) {
  if (!ep_.password_unset.empty()) {
    // Never asked without the password it needs.
    error = "environment variable " + ep_.password_unset + " (password_env) is not set";
    return false;
  }
  const timeval tv{static_cast<time_t>(timeout_.count() / 1000), static_cast<suseconds_t>(timeout_.count() % 1000 * 1000)};
  c_ = redisConnectWithTimeout(ep_.host.c_str(), ep_.port, tv);
  if (!c_ || c_->err) return dropped(error);
  redisSetTimeout(c_, tv);
  std::vector<std::vector<std::string>> setup;
  if (!ep_.password.empty())
    setup.push_back(ep_.username.empty() ? std::vector<std::string>{"AUTH", ep_.password}
                                         : std::vector<std::string>{"AUTH", ep_.username, ep_.password});
  if (ep_.db != 0) setup.push_back({"SELECT", std::to_string(ep_.db)});
  for (const auto& cmd : setup) {
    auto r = call(cmd, error);
    if (!r) return false;
    if (r->isError()) {
      error = cmd[0] + ": " + r->str;  // never the password itself
      close();
      return false;
    }
  }
  return true;
}

std::optional<RedisReply> BlockingRedis::call(const std::vector<std::string>& args, std::string& error) {
  std::string resp;
  std::vector<std::string_view> views(args.begin(), args.end());
  appendResp(resp, views);
  auto replies = pipeline(resp, 1, error);
  if (!replies) return std::nullopt;
  return std::move(replies->front());
}

std::optional<std::vector<RedisReply>> BlockingRedis::pipeline(const std::string& resp, std::size_t count, std::string& error) {
  if (!c_ && !connect(error)) return std::nullopt;
  if (redisAppendFormattedCommand(c_, resp.data(), resp.size()) != REDIS_OK) {
    dropped(error);
    return std::nullopt;
  }
  std::vector<RedisReply> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    void* reply = nullptr;
    if (redisGetReply(c_, &reply) != REDIS_OK || !reply) {
      dropped(error);
      return std::nullopt;
    }
    out.push_back(copyReply(static_cast<redisReply*>(reply)));
    freeReplyObject(reply);
  }
  return out;
}

bool BlockingRedis::pipelineChecked(const std::string& resp, std::size_t count, std::string& error) {
  if (!c_ && !connect(error)) return false;
  if (redisAppendFormattedCommand(c_, resp.data(), resp.size()) != REDIS_OK) return dropped(error);
  bool ok = true;
  for (std::size_t i = 0; i < count; ++i) {
    void* reply = nullptr;
    if (redisGetReply(c_, &reply) != REDIS_OK || !reply) return dropped(error);
    const auto* r = static_cast<const redisReply*>(reply);
    if (ok && r->type == REDIS_REPLY_ERROR) {
      error.assign(r->str, r->len);
      ok = false;
    }
    freeReplyObject(reply);
  }
  return ok;
}

}  // namespace tahua
