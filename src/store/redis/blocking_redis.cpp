#include "store/redis/blocking_redis.h"

#include <hiredis/hiredis.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

bool BlockingRedis::send(std::span<const std::string_view> pieces, std::string& error) {
  // hiredis' redisAppendFormattedCommand would copy the commands into its own buffer
  // (growing it by doubling) before one write; the pieces go out as they are instead, up
  // to IOV_MAX at a time. The context's send timeout holds for these writes too.
  constexpr std::size_t kMaxIov = 1024;
  iovec iov[kMaxIov];
  std::size_t next = 0, skip = 0;  // the first piece not fully written, and its bytes written
  while (next < pieces.size()) {
    std::size_t n = 0;
    for (std::size_t i = next; i < pieces.size() && n < kMaxIov; ++i) {
      const std::string_view piece = i == next ? pieces[i].substr(skip) : pieces[i];
      if (piece.empty()) continue;
      iov[n++] = iovec{const_cast<char*>(piece.data()), piece.size()};
    }
    if (n == 0) break;
    const ssize_t wrote = ::writev(c_->fd, iov, static_cast<int>(n));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      error = wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? std::string("write: timed out")
                                                                       : std::string("write: ") + std::strerror(errno);
      close();
      return false;
    }
    auto left = static_cast<std::size_t>(wrote);
    while (next < pieces.size() && left >= pieces[next].size() - skip) {
      left -= pieces[next].size() - skip;
      ++next;
      skip = 0;
    }
    skip += left;
  }
  return true;
}

std::optional<std::vector<RedisReply>> BlockingRedis::pipeline(const std::string& resp, std::size_t count, std::string& error) {
  if (!c_ && !connect(error)) return std::nullopt;
  const std::string_view piece = resp;
  if (!send(std::span(&piece, 1), error)) return std::nullopt;
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
  const std::string_view piece = resp;
  return pipelineChecked(std::span(&piece, 1), count, error);
}

bool BlockingRedis::pipelineChecked(std::span<const std::string_view> pieces, std::size_t count, std::string& error) {
  if (!c_ && !connect(error)) return false;
  if (!send(pieces, error)) return false;
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
