#include "telemetry/usage_sinks.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/redis_url.h"
#include "net/http_client.h"
#include "store/redis/blocking_redis.h"
#include "store/redis/resp.h"
#include "telemetry/export_post.h"
#include "telemetry/ledger_sink.h"

namespace tahua {
namespace {

using Clock = std::chrono::steady_clock;

// Appends whole batches; past rotate_bytes (before a batch that would pass it) or
// rotate_interval the file is renamed to path.1 (path.1 to path.2 ...; the oldest
// beyond `keep` removed) and a new one started.
class FileSink final : public UsageSink {
 public:
  explicit FileSink(const UsageSinkConfig& c) : c_(c) {}
  ~FileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }

  bool deliver(std::string_view lines, std::string& error) override {
    if (fd_ < 0 && !open(error)) return false;
    if ((size_ > 0 && size_ + lines.size() > c_.rotate_bytes) ||
        (c_.rotate_interval.count() > 0 && Clock::now() - opened_ >= c_.rotate_interval && size_ > 0)) {
      rotate();
      if (!open(error)) return false;
    }
    std::string_view rest = lines;
    while (!rest.empty()) {
      const ssize_t n = ::write(fd_, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = std::string("write ") + c_.path + ": " + std::strerror(errno);
        // What was written stays; all of it is delivered again (at least once). The
        // file is reopened next time (a full disk may have been cleared).
        ::close(fd_);
        fd_ = -1;
        return false;
      }
      rest.remove_prefix(static_cast<std::size_t>(n));
      size_ += static_cast<std::uint64_t>(n);
    }
    return true;
  }

 private:
  bool open(std::string& error) {
    fd_ = ::open(c_.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd_ < 0) {
      error = std::string("open ") + c_.path + ": " + std::strerror(errno);
      return false;
    }
    struct stat st{};
    size_ = ::fstat(fd_, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    opened_ = Clock::now();
    return true;
  }

  void rotate() {
    ::close(fd_);
    fd_ = -1;
    const unsigned keep = std::max(1u, c_.keep);
    std::remove((c_.path + "." + std::to_string(keep)).c_str());
    for (unsigned i = keep; i > 1; --i)
      std::rename((c_.path + "." + std::to_string(i - 1)).c_str(), (c_.path + "." + std::to_string(i)).c_str());
    std::rename(c_.path.c_str(), (c_.path + ".1").c_str());
  }

  UsageSinkConfig c_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  Clock::time_point opened_{};
};

// XADD <stream> MAXLEN ~ <maxlen> * record_id <id> record <json>, pipelined, over a
// blocking connection with the sink's timeout (on the exporter's thread).
class RedisStreamSink final : public UsageSink {
 public:
  RedisStreamSink(const UsageSinkConfig& c, RedisEndpoint ep) : c_(c), redis_(std::move(ep), c.timeout) {}

  bool deliver(std::string_view lines, std::string& error) override {
    // Every XADD's head (the command up to the record's length, store/redis/resp.h's
    // format) in one buffer, and the records sent from the batch as they are: one
    // writev of heads and records, then the replies in order.
    heads_.clear();
    spans_.clear();
    for (std::size_t pos = 0; pos < lines.size();) {
      std::size_t end = lines.find('\n', pos);
      if (end == std::string_view::npos) end = lines.size();
      std::string_view record = lines.substr(pos, end - pos);
      pos = end + 1;
      if (record.empty()) continue;
      // {"record_id":"<36 characters>" opens every record (usage_filter.cpp).
      std::string_view id = record.size() > 50 ? record.substr(14, 36) : std::string_view{};
      const std::size_t from = heads_.size();
      if (!spans_.empty()) heads_.append("\r\n", 2);  // the previous record's end
      heads_.append(prefix_);
      appendRespArg(heads_, id);
      appendRespArg(heads_, "record");
      appendRespLength(heads_, record.size());
      spans_.push_back(Span{from, heads_.size() - from, record});
    }
    if (spans_.empty()) return true;
    pieces_.clear();
    for (const Span& sp : spans_) {
      pieces_.emplace_back(heads_.data() + sp.head_at, sp.head_size);
      pieces_.push_back(sp.record);
    }
    pieces_.emplace_back("\r\n", 2);
    std::string why;
    if (redis_.pipelineChecked(pieces_, spans_.size(), why)) return true;
    if (redis_.connected()) {  // an error reply: the connection is dropped, as for any failure
      error = "XADD: " + why;
      redis_.close();
    } else {
      error = why;
    }
    return false;
  }

 private:
  struct Span {
    std::size_t head_at, head_size;
    std::string_view record;
  };
  // XADD <stream> MAXLEN ~ <maxlen> * record_id: the same for every record (ten
  // arguments: the id, "record" and the record follow).
  static std::string commandPrefix(const UsageSinkConfig& c) {
    std::string out;
    appendRespLine(out, '*', 10);
    for (std::string_view a : {std::string_view("XADD"), std::string_view(c.stream), std::string_view("MAXLEN"), std::string_view("~")})
      appendRespArg(out, a);
    appendRespArg(out, std::to_string(c.maxlen));
    appendRespArg(out, "*");
    appendRespArg(out, "record_id");
    return out;
  }

  UsageSinkConfig c_;
  BlockingRedis redis_;
  std::string prefix_ = commandPrefix(c_);
  std::string heads_;                    // the commands' heads of one delivery
  std::vector<Span> spans_;              // where each record's head is, and the record
  std::vector<std::string_view> pieces_;  // what is written, in order
};

// POST a JSON array of up to `batch` records per request; a 2xx answer is delivery.
class WebhookSink final : public UsageSink {
 public:
  WebhookSink(const UsageSinkConfig& c, HttpUrl url) : c_(c), url_(std::move(url)) {}

  bool deliver(std::string_view lines, std::string& error) override {
    std::string body = "[";
    std::size_t in_body = 0;
    auto send = [&]() {
      body.back() = ']';
      if (body == "]") return true;
      const OutboundResponse r = http_.fetch(exportPost(url_, c_.headers, std::move(body), c_.timeout));
      body = "[";
      in_body = 0;
      if (r.status >= 200 && r.status < 300) return true;
      error = r.status ? "HTTP " + std::to_string(r.status) : r.error;
      return false;
    };
    for (std::size_t pos = 0; pos < lines.size();) {
      std::size_t end = lines.find('\n', pos);
      if (end == std::string_view::npos) end = lines.size();
      if (end > pos) {
        body.append(lines.substr(pos, end - pos));
        body.push_back(',');
        if (++in_body >= c_.batch && !send()) return false;
      }
      pos = end + 1;
    }
    return in_body == 0 || send();
  }

 private:
  UsageSinkConfig c_;
  HttpUrl url_;
  BlockingHttpClient http_;  // the exporter thread's, with its kept-alive connection
};

}  // namespace

std::unique_ptr<UsageSink> makeUsageSink(const UsageSinkConfig& c, std::string& error) {
  switch (c.type) {
    case UsageSinkConfig::Type::File: return std::make_unique<FileSink>(c);
    case UsageSinkConfig::Type::RedisStream: {
      RedisEndpoint ep;
      if (auto err = parseRedisUrl(c.url, ep)) {
        error = *err;
        return nullptr;
      }
      useCredentials(c.auth, ep);
      return std::make_unique<RedisStreamSink>(c, std::move(ep));
    }
    case UsageSinkConfig::Type::Webhook: {
      auto url = parseHttpUrl(c.url, &error, true);
      if (!url) return nullptr;
      return std::make_unique<WebhookSink>(c, std::move(*url));
    }
    case UsageSinkConfig::Type::Sqlite:
    case UsageSinkConfig::Type::Postgres: return makeLedgerSink(c, error);
  }
  error = "unknown sink type";
  return nullptr;
}

}  // namespace tahua
