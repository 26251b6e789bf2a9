#include "store/redis/redis_connection.h"
#include "store/redis/redis_stats.h"
#include "store/redis/resp.h"

#include <hiredis/hiredis.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <charconv>


namespace tahua {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr Millis kMaxBackoff{2'000};
constexpr std::size_t kMaxPending = 100'000;  // beyond it a command fails at once

void appendCommand(std::string& out, std::span<const std::string_view> args) { appendResp(out, args); }

}  // namespace

RedisReply copyReply(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::Integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::String;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::Status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::Error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::Array;
      out.elements.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(copyReply(r->element[i]));
      break;
    default: out.type = RedisReply::Type::Nil;
  }
  return out;
}

RedisConnection::RedisConnection(asio::io_context& io, RedisEndpoint endpoint, Millis command_timeout)
    : io_(io), endpoint_(std::move(endpoint)), timeout_(command_timeout), socket_(io), timer_(io), in_(16 * 1024) {}

RedisConnection::~RedisConnection() {
  if (reader_) redisReaderFree(reader_);
}

bool RedisConnection::usable() const {
  return state_ != State::Down || std::chrono::steady_clock::now() >= retry_at_;
}

void RedisConnection::close() { fail("closed"); }

void RedisConnection::formatCommand(std::string& out, std::span<const std::string_view> args) { appendCommand(out, args); }

void RedisConnection::send(std::span<const std::string_view> args, Callback cb) {
  if (!usable() || pending_.size() >= kMaxPending) {
    RedisCommandStats& stats = RedisCommandStats::global();
    stats.commands.fetch_add(1, std::memory_order_relaxed);
    stats.errors.fetch_add(1, std::memory_order_relaxed);
    asio::post(io_, [cb = std::move(cb)] { cb(std::nullopt); });
    return;
  }
  appendCommand(out_, args);
  queued(std::move(cb));
}

void RedisConnection::sendFormatted(std::string_view resp, Callback cb) {
  if (!usable() || pending_.size() >= kMaxPending) {
    RedisCommandStats& stats = RedisCommandStats::global();
    stats.commands.fetch_add(1, std::memory_order_relaxed);
    stats.errors.fetch_add(1, std::memory_order_relaxed);
    asio::post(io_, [cb = std::move(cb)] { cb(std::nullopt); });
    return;
  }
  out_.append(resp);
  queued(std::move(cb));
}

void RedisConnection::queued(Callback cb) {
  RedisCommandStats::global().commands.fetch_add(1, std::memory_order_relaxed);
  pending_.push_back({std::move(cb), std::chrono::steady_clock::now() + timeout_});
  armTimer();
  if (state_ == State::Down) {
    connect();
  } else if (state_ == State::Up && !flush_posted_ && !write_in_flight_) {
    // Written at the end of this turn of the event loop, with whatever else the other
    // requests of the turn send: one system call for many commands.
    flush_posted_ = true;
    asio::post(io_, [this, self = shared_from_this(), gen = generation_] {
      flush_posted_ = false;
      if (gen == generation_) flush();
    });
  }
}

void RedisConnection::connect() {
  state_ = State::Connecting;
  if (where_) endpoint_ = where_();
  const unsigned gen = ++generation_;
  auto self = shared_from_this();
  if (!endpoint_.password_unset.empty()) {
    // Never asked without the password it needs: down, as a server that does not answer.
    asio::post(io_, [this, self, gen] {
      if (gen == generation_) fail("the variable its password_env names is not set");
    });
    return;
  }
  auto resolver = std::make_shared<tcp::resolver>(io_);
  resolver->async_resolve(endpoint_.host, std::to_string(endpoint_.port), [this, self, resolver, gen](auto ec, auto results) {
    if (gen != generation_) return;
    if (ec) return fail("cannot resolve the host");
    socket_ = tcp::socket(io_);
    asio::async_connect(socket_, results, [this, self, gen](auto ec, const tcp::endpoint&) {
      if (gen != generation_) return;
      if (ec) return fail("cannot connect");
      socket_.set_option(tcp::no_delay(true));
      if (reader_) redisReaderFree(reader_);
      reader_ = redisReaderCreate();
      // AUTH and SELECT go first, ahead of whatever was queued meanwhile.
      std::string handshake;
      std::vector<Pending> first;
      auto check = [this, self, gen](std::optional<RedisReply> r) {
        if (gen == generation_ && (!r || r->isError())) fail("AUTH, SELECT or SCRIPT LOAD was refused");
      };
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      if (!endpoint_.password.empty()) {
        const std::string_view auth1[] = {"AUTH", endpoint_.password};
        const std::string_view auth2[] = {"AUTH", endpoint_.username, endpoint_.password};
        if (endpoint_.username.empty()) appendCommand(handshake, auth1);
        else appendCommand(handshake, auth2);
        first.push_back({check, deadline});
      }
      if (endpoint_.db != 0) {
        const std::string db = std::to_string(endpoint_.db);
        const std::string_view select[] = {"SELECT", db};
        appendCommand(handshake, select);
        first.push_back({check, deadline});
      }
      for (const auto& command : handshake_) {
        std::vector<std::string_view> views(command.begin(), command.end());
        appendCommand(handshake, views);
        first.push_back({check, deadline});
      }
      out_.insert(0, handshake);
      RedisCommandStats::global().commands.fetch_add(first.size(), std::memory_order_relaxed);
      for (auto it = first.rbegin(); it != first.rend(); ++it) pending_.push_front(std::move(*it));
      state_ = State::Up;
      backoff_ = Millis(100);
      startRead();
      flush();
    });
  });
}

void RedisConnection::flush() {
  if (write_in_flight_ || out_.empty() || state_ != State::Up) return;
  writing_.swap(out_);
  out_.clear();
  write_in_flight_ = true;
  auto self = shared_from_this();
  const unsigned gen = generation_;
  asio::async_write(socket_, asio::buffer(writing_), [this, self, gen](auto ec, std::size_t) {
    if (gen != generation_) return;
    write_in_flight_ = false;
    writing_.clear();
    if (ec) return fail("write failed");
    flush();
  });
}

void RedisConnection::startRead() {
  auto self = shared_from_this();
  const unsigned gen = generation_;
  socket_.async_read_some(asio::buffer(in_), [this, self, gen](auto ec, std::size_t n) {
    if (gen != generation_) return;
    if (ec) return fail("the server closed the connection");
    if (redisReaderFeed(reader_, in_.data(), n) != REDIS_OK) return fail("protocol error");
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader_, &raw) != REDIS_OK) return fail("protocol error");
      if (!raw) break;
      RedisReply reply = copyReply(static_cast<redisReply*>(raw));
      freeReplyObject(raw);
      if (pending_.empty()) {
        if (on_push_) on_push_(reply);
        continue;
      }
      // Sent at deadline - timeout: the latency without a field per command.
      RedisCommandStats& stats = RedisCommandStats::global();
      stats.observe(std::chrono::steady_clock::now() - (pending_.front().deadline - timeout_));
      if (reply.isError()) stats.errors.fetch_add(1, std::memory_order_relaxed);
      Callback cb = std::move(pending_.front().cb);
      pending_.pop_front();
      cb(std::move(reply));
      if (gen != generation_) return;  // the callback closed the connection
    }
    startRead();
  });
}

void RedisConnection::armTimer() {
  if (timer_armed_ || pending_.empty()) return;
  timer_armed_ = true;
  timer_.expires_at(pending_.front().deadline);
  auto self = shared_from_this();
  timer_.async_wait([this, self](auto) {
    timer_armed_ = false;
    if (pending_.empty()) return;
    if (pending_.front().deadline <= std::chrono::steady_clock::now()) return fail("command timeout");
    armTimer();
  });
}

void RedisConnection::fail(const char* why) {
  ++generation_;
  boost::system::error_code ignored;
  socket_.close(ignored);
  last_error_ = why;  // the store logs state changes once, not every connection's
  state_ = State::Down;
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  backoff_ = std::min(backoff_ * 2, kMaxBackoff);
  write_in_flight_ = false;
  flush_posted_ = false;
  out_.clear();
  writing_.clear();
  std::deque<Pending> failed;
  failed.swap(pending_);
  RedisCommandStats& stats = RedisCommandStats::global();
  (std::string_view(why) == "command timeout" ? stats.timeouts : stats.errors).fetch_add(failed.size(), std::memory_order_relaxed);
  for (auto& p : failed) p.cb(std::nullopt);
  if (on_down_) on_down_();
}

}  // namespace tahua
