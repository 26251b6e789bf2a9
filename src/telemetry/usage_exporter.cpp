#include "telemetry/usage_exporter.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "telemetry/usage_record.h"
#include "core/thread_name.h"

namespace tahua {

using Clock = std::chrono::steady_clock;

namespace {
constexpr Millis kMaxBackoff{30'000};
constexpr std::size_t kReplayChunk = 1 << 20;

std::size_t countLines(std::string_view s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }
}  // namespace

struct UsageExporter::Sink {
  // A formatted batch, shared by every sink's queue (the last one done frees it).
  struct Batch {
    std::shared_ptr<const JsonBuf> lines;
    std::size_t records = 0;
  };
  std::string name;
  std::unique_ptr<UsageSink> out;
  std::string spill_path;
  // The spill is written by the sink's thread and, when its inbox is full, by the
  // exporter's: appends and the reset after a whole replay are under spill_mu.
  std::mutex spill_mu;
  int spill_fd = -1;                 // guarded by spill_mu
  std::uint64_t replay_offset = 0;  // the spill before it was delivered (the sink's thread's)
  Clock::time_point next_retry{};
  Millis backoff{0};
  std::atomic<bool> up{true};
  std::atomic<std::uint64_t> spill_size{0};
  std::atomic<std::uint64_t> delivered{0}, failures{0}, dropped{0};
  Clock::time_point last_drop_log{};
  // Its thread and what waits for it.
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Batch> inbox;      // guarded by mu
  std::size_t inbox_records = 0;  // guarded by mu
  bool closing = false;         // guarded by mu: deliver or spill the inbox, then stop
  std::atomic<std::uint64_t> handled{0};  // records delivered, spilled or dropped
  Clock::time_point last_behind_log{};  // the exporter's thread's

  // False when the inbox already holds `bound` records: the sink cannot keep up (or
  // hangs in a delivery), and memory stays bounded.
  bool post(Batch batch, std::size_t bound) {
    {
      std::lock_guard lock(mu);
      if (inbox_records + batch.records > bound && !inbox.empty()) return false;
      inbox_records += batch.records;
      inbox.push_back(std::move(batch));
    }
    cv.notify_one();
    return true;
  }
  void close() {
    {
      std::lock_guard lock(mu);
      closing = true;
    }
    cv.notify_one();
  }

  ~Sink() {
    if (spill_fd >= 0) ::close(spill_fd);  // the threads are joined
  }
};

std::unique_ptr<UsageExporter> UsageExporter::start(const UsageConfig& config, std::string& error) {
  std::error_code ec;
  std::filesystem::create_directories(config.spill_dir, ec);
  if (ec || ::access(config.spill_dir.c_str(), W_OK) != 0) {
    error = "usage.spill_dir \"" + config.spill_dir + "\" is not a writable directory";
    return nullptr;
  }
  std::unique_ptr<UsageExporter> e(new UsageExporter(config));
  for (const auto& c : config.sinks) {
    auto sink = std::make_unique<Sink>();
    sink->name = c.name;
    sink->out = makeUsageSink(c, error);
    if (!sink->out) {
      error = "usage.sinks " + c.name + ": " + error;
      return nullptr;
    }
    sink->spill_path = config.spill_dir + "/" + c.name + ".spill";
    sink->backoff = config.retry_backoff;
    struct stat st{};
    if (::stat(sink->spill_path.c_str(), &st) == 0 && st.st_size > 0) {
      // An earlier run's spill: replayed first, before anything new reaches the sink.
      sink->spill_size = static_cast<std::uint64_t>(st.st_size);
      log::info("usage sink has records spilled by an earlier run; replaying",
                {{"sink", c.name}, {"bytes", static_cast<std::int64_t>(st.st_size)}});
    }
    e->sinks_.push_back(std::move(sink));
  }
  // What an unclean exit of the last run left unaccounted for.
  std::ifstream state(config.spill_dir + "/usage.state");
  std::uint64_t accepted = 0, handled = 0;
  std::string clean;
  if (state >> accepted >> handled >> clean && clean != "clean" && accepted > handled) {
    e->lost_at_start_ = accepted - handled;
    log::error("usage records lost by an unclean exit of the previous run (in memory when it died)",
               {{"records", static_cast<std::int64_t>(accepted - handled)}});
  }
  e->writeState(false);
  for (std::size_t i = 0; i < e->sinks_.size(); ++i)
    e->sinks_[i]->thread = std::thread([p = e.get(), &sink = *e->sinks_[i], i] {
      nameThisThread("tahua-usage-" + std::to_string(i));
      p->runSink(sink);
    });
  e->thread_ = std::thread([p = e.get()] {
    nameThisThread("tahua-usage");
    p->run();
  });
  return e;
}

UsageExporter::UsageExporter(const UsageConfig& config) : config_(config), queue_(config.max_queue_records) {}

UsageExporter::~UsageExporter() { stop(); }

void UsageExporter::stop() {
  if (stopped_) return;
  stopped_ = true;
  queue_.close();
  if (thread_.joinable()) thread_.join();
}

UsageExporter::Stats UsageExporter::stats() const {
  Stats s;
  s.records = queue_.accepted();
  s.dropped_queue = queue_.dropped();
  s.lost_at_start = lost_at_start_;
  s.depth = queue_.depth();
  for (const auto& k : sinks_) {
    SinkStats ks;
    ks.name = k->name;
    ks.up = k->up.load(std::memory_order_relaxed);
    ks.delivered = k->delivered.load(std::memory_order_relaxed);
    ks.failures = k->failures.load(std::memory_order_relaxed);
    ks.dropped = k->dropped.load(std::memory_order_relaxed);
    ks.spill_bytes = k->spill_size.load(std::memory_order_relaxed);
    s.sinks.push_back(std::move(ks));
  }
  return s;
}

// The exporter's thread: formats what the workers handed over, once, for every sink.
void UsageExporter::run() {
  auto last_state = Clock::now();
  for (;;) {
    auto batches = queue_.take(Millis(250));
    const bool closing = batches.empty() && queue_.closed();
    for (const auto& b : batches) {
      // The workers' packed records become the JSON lines every sink gets (and a spill keeps).
      // Sized from the last batch's bytes a record, and the room the formatter reserves
      // for a line at worst (every string escaped): no regrowth copies (a buffer is the
      // sinks' until the last is done with it, so it is not reused).
      auto lines = std::make_shared<JsonBuf>();
      lines->reserve(b.items * bytes_per_record_ + kLineSlack);
      formatUsageRecords(b.data.view(), *lines);
      if (b.items) bytes_per_record_ = lines->size() / b.items + 1;
      for (auto& s : sinks_)
        if (!s->post(Sink::Batch{lines, b.items}, config_.max_queue_records)) refused(*s, lines->view(), b.items);
      formatted_ += b.items;
    }
    queue_.recycle(batches);
    if (closing) break;
    const auto now = Clock::now();
    if (!batches.empty() || now - last_state >= std::chrono::seconds(1)) {
      writeState(false);
      last_state = now;
    }
  }
  for (auto& s : sinks_) s->close();
  for (auto& s : sinks_)
    if (s->thread.joinable()) s->thread.join();
  writeState(handled() == queue_.accepted());
}

// A sink's thread: delivers its batches in order (or spills them), and replays its spill.
void UsageExporter::runSink(Sink& s) {
  std::deque<Sink::Batch> work;
  for (;;) {
    bool closing = false;
    {
      std::unique_lock lock(s.mu);
      s.cv.wait_for(lock, Millis(250), [&] { return !s.inbox.empty() || s.closing; });
      work.swap(s.inbox);
      s.inbox_records = 0;
      closing = s.closing && work.empty();
    }
    for (auto& b : work) {
      handle(s, b.lines->view(), b.records);
      s.handled.fetch_add(b.records, std::memory_order_relaxed);
    }
    work.clear();
    if (closing) break;
    if (s.spill_size.load(std::memory_order_relaxed) > 0 && Clock::now() >= s.next_retry) replay(s);
    s.out->tick();
  }
}

// A batch a sink's full inbox refused (the sink is slower than the records come, or hangs
// in a delivery): spilled for it here, replayed by its thread when it catches up. Memory
// stays bounded and nothing is lost that the spill can hold.
void UsageExporter::refused(Sink& s, std::string_view lines, std::size_t records) {
  spill(s, lines, records);
  s.handled.fetch_add(records, std::memory_order_relaxed);
  if (auto now = Clock::now(); now - s.last_behind_log >= std::chrono::seconds(10)) {
    s.last_behind_log = now;
    log::warn("usage sink behind by usage.max_queue_records; spilling what arrives for it",
              {{"sink", s.name}, {"records", static_cast<std::int64_t>(records)}});
  }
}

std::uint64_t UsageExporter::handled() const {
  std::uint64_t least = formatted_;
  for (const auto& s : sinks_) least = std::min(least, s->handled.load(std::memory_order_relaxed));
  return least;
}

void UsageExporter::handle(Sink& s, std::string_view lines, std::size_t records) {
  if (s.spill_size.load(std::memory_order_relaxed) > 0) {  // behind its spill: keep the order
    spill(s, lines, records);
    return;
  }
  std::string error;
  if (s.out->deliver(lines, error)) {
    s.delivered.fetch_add(records, std::memory_order_relaxed);
    return;
  }
  s.failures.fetch_add(1, std::memory_order_relaxed);
  if (s.up.exchange(false)) log::warn("usage sink failed; spilling its records until it is back", {{"sink", s.name}, {"error", error}});
  s.backoff = config_.retry_backoff;
  s.next_retry = Clock::now() + s.backoff;
  spill(s, lines, records);
}

void UsageExporter::spill(Sink& s, std::string_view lines, std::size_t records) {
  std::lock_guard lock(s.spill_mu);
  const std::uint64_t size = s.spill_size.load(std::memory_order_relaxed);
  auto drop = [&](const char* why) {
    s.dropped.fetch_add(records, std::memory_order_relaxed);
    if (auto now = Clock::now(); now - s.last_drop_log >= std::chrono::seconds(10)) {
      s.last_drop_log = now;
      log::error("usage records dropped", {{"sink", s.name}, {"records", static_cast<std::int64_t>(records)}, {"reason", why}});
    }
  };
  if (size + lines.size() > config_.spill_max_bytes) return drop("spill file full (usage.spill_max_bytes)");
  if (s.spill_fd < 0) s.spill_fd = ::open(s.spill_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (s.spill_fd < 0) return drop(std::strerror(errno));
  std::string_view rest = lines;
  while (!rest.empty()) {
    const ssize_t n = ::write(s.spill_fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // A torn tail would be half a record: cut it off again.
      if (::ftruncate(s.spill_fd, static_cast<off_t>(size)) != 0) {}
      return drop(std::strerror(errno));
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  ::fdatasync(s.spill_fd);  // the spill is what survives the sink being down
  s.spill_size.store(size + lines.size(), std::memory_order_relaxed);
}

void UsageExporter::replay(Sink& s) {
  const int fd = ::open(s.spill_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::lock_guard lock(s.spill_mu);
    s.spill_size = 0;
    s.replay_offset = 0;
    return;
  }
  std::string chunk;
  for (int round = 0; round < 8; ++round) {  // a bounded share of the loop: new batches wait otherwise
    const std::uint64_t size = s.spill_size.load(std::memory_order_relaxed);
    if (s.replay_offset >= size) break;
    chunk.resize(static_cast<std::size_t>(std::min<std::uint64_t>(kReplayChunk, size - s.replay_offset)));
    const ssize_t n = ::pread(fd, chunk.data(), chunk.size(), static_cast<off_t>(s.replay_offset));
    if (n <= 0) break;
    chunk.resize(static_cast<std::size_t>(n));
    std::size_t whole = chunk.rfind('\n');
    if (whole == std::string::npos) {  // one record longer than the chunk: skip a torn line
      s.replay_offset += chunk.size();
      continue;
    }
    chunk.resize(whole + 1);
    std::string error;
    if (!s.out->deliver(chunk, error)) {
      s.failures.fetch_add(1, std::memory_order_relaxed);
      s.backoff = std::min(kMaxBackoff, std::max(config_.retry_backoff, s.backoff * 2));
      s.next_retry = Clock::now() + s.backoff;
      ::close(fd);
      return;
    }
    s.delivered.fetch_add(countLines(chunk), std::memory_order_relaxed);
    s.replay_offset += chunk.size();
  }
  ::close(fd);
  std::lock_guard lock(s.spill_mu);  // no append between the check and the reset
  if (s.replay_offset >= s.spill_size.load(std::memory_order_relaxed)) {
    // All of it went through: start the spill afresh.
    if (s.spill_fd >= 0) ::close(s.spill_fd);
    s.spill_fd = -1;
    ::truncate(s.spill_path.c_str(), 0);
    s.spill_size = 0;
    s.replay_offset = 0;
    s.backoff = config_.retry_backoff;
    if (!s.up.exchange(true)) log::info("usage sink is back; its spilled records were delivered", {{"sink", s.name}});
  }
}

void UsageExporter::writeState(bool clean) {
  const std::string path = config_.spill_dir + "/usage.state";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << queue_.accepted() << ' ' << handled() << ' ' << (clean ? "clean" : "running") << '\n';
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace tahua
