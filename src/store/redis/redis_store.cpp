#include "store/redis/redis_store.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <algorithm>
#include <charconv>
#include <unordered_map>
#include <future>

#include <boost/json.hpp>

#include "core/base64.h"
#include "core/log.h"
#include "store/redis/redis_connection.h"
#include "store/redis/redis_scripts.h"

namespace tahua {
namespace asio = boost::asio;

namespace {

constexpr std::size_t kMaxKeptAdjustments = 100'000;
constexpr std::string_view kRecordsPrefix = "tahua:records:";
constexpr const char* kChangesChannel = "tahua:changes";
constexpr const char* kReplicasKey = "tahua:replicas";

// The connection of the worker whose thread this is (RedisStore::attach).
thread_local std::shared_ptr<RedisConnection> t_connection;

// A command's arguments built without a string per argument: numbers are written into
// one buffer reserved up front (so the views into it stay valid), keys are views of the
// caller's. Reused by every command of the thread.
struct ArgScratch {
  std::string numbers;
  std::vector<std::pair<std::size_t, std::size_t>> number_at;  // (offset, size), or size npos: a view
  std::vector<std::string_view> views;
  std::vector<std::string_view> argv;
  void begin(std::size_t max_number_bytes) {
    numbers.clear();
    numbers.reserve(max_number_bytes);
    number_at.clear();
    views.clear();
    argv.clear();
  }
  void view(std::string_view v) {
    number_at.emplace_back(views.size(), std::string_view::npos);
    views.push_back(v);
  }
  void number(std::int64_t v) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    number_at.emplace_back(numbers.size(), static_cast<std::size_t>(end - buf));
    numbers.append(buf, end);
  }
  std::span<const std::string_view> finish() {
    for (const auto& [at, size] : number_at)
      argv.push_back(size == std::string_view::npos ? views[at] : std::string_view(numbers.data() + at, size));
    return argv;
  }
};
thread_local ArgScratch t_args;

// Calibrations of this worker, summed per counter and sent together every 20 ms (one
// script call for all of them, not one per request).
struct PendingAdjustment {
  LimitSpec spec;
  std::int64_t charged_ms = 0;
  std::int64_t delta = 0;
};
struct AdjustBatch {
  std::unordered_map<std::string, PendingAdjustment> pending;  // counter (#period for quotas) -> sum
  std::unique_ptr<asio::steady_timer> timer;
  bool armed = false;
};
thread_local std::unique_ptr<AdjustBatch> t_adjust;
constexpr Millis kAdjustEvery{20};
constexpr std::size_t kAdjustPerCommand = 200;

std::string sha1Hex(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha1(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string replicaId() {
  char host[128] = {};
  gethostname(host, sizeof host - 1);
  unsigned char rnd[4];
  RAND_bytes(rnd, sizeof rnd);
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
  return std::string(host) + ":" + std::to_string(getpid()) + ":" + suffix;
}

// The checks, copied: the reply (or the local fallback) comes after the caller's span died.
struct SavedChecks {
  std::vector<std::string> keys;
  std::vector<LimitCheck> checks;
  explicit SavedChecks(std::span<const LimitCheck> in) {
    keys.reserve(in.size());
    for (const auto& c : in) keys.emplace_back(c.key);
    checks.assign(in.begin(), in.end());
    for (std::size_t i = 0; i < checks.size(); ++i) checks[i].key = keys[i];
  }
};

bool parseAdmission(const RedisReply& r, std::size_t n, Admission& a) {
  if (r.type != RedisReply::Type::Array || r.elements.size() != 3 + 5 * n) return false;
  for (const auto& e : r.elements)
    if (e.type != RedisReply::Type::Integer) return false;
  a.allowed = r.elements[0].integer == 1;
  a.denied = r.elements[1].integer > 0 ? static_cast<std::size_t>(r.elements[1].integer - 1) : Admission::kMaxChecks;
  a.at_ms = r.elements[2].integer;
  a.count = n;
  for (std::size_t i = 0; i < n; ++i) {
    const auto* e = &r.elements[3 + 5 * i];
    LimitDecision& d = a.decisions[i];
    d.allowed = e[0].integer == 1;
    d.never = e[1].integer == 1;
    d.remaining = e[2].integer;
    d.reset_ms = e[3].integer;
    d.retry_after_ms = e[4].integer;
  }
  return a.allowed || a.denied < n;
}

// A reply that means "this server cannot serve us now" (a replica after a failover, a
// server loading its data): the connection is closed so the next command reconnects,
// with Sentinel to the current master.
bool unusableServer(const std::optional<RedisReply>& r) {
  if (!r || !r->isError()) return false;
  for (const char* prefix : {"READONLY", "LOADING", "MASTERDOWN", "NOSCRIPT"})
    if (r->str.rfind(prefix, 0) == 0) return true;
  return false;
}

std::vector<std::string> checkArgs(const LimitCheck& c) {
  return {std::to_string(static_cast<int>(c.spec.kind)), std::to_string(c.spec.limit), std::to_string(c.spec.period_ms),
          std::to_string(static_cast<int>(c.spec.calendar))};
}

}  // namespace

RedisStore::RedisStore(RedisStoreConfig config)
    : config_(std::move(config)),
      replica_id_(replicaId()),
      admit_sha_(sha1Hex(redis_scripts::kAdmit)),
      adjust_sha_(sha1Hex(redis_scripts::kAdjust)),
      heartbeat_sha_(sha1Hex(redis_scripts::kHeartbeat)),
      renew_sha_(sha1Hex(redis_scripts::kRenewLock)),
      unlock_sha_(sha1Hex(redis_scripts::kUnlock)) {}

RedisStore::~RedisStore() {
  if (control_io_) control_io_->stop();
  if (control_thread_.joinable()) control_thread_.join();
}

void RedisStore::evalsha(RedisConnection& conn, const std::string& sha, const char* script, std::vector<std::string> args,
                         std::function<void(std::optional<RedisReply>)> cb) {
  args.insert(args.begin(), {"EVALSHA", sha});
  auto retry_args = std::make_shared<std::vector<std::string>>(args);
  auto self = conn.shared_from_this();
  conn.send(args, [self, retry_args, script, cb = std::move(cb)](std::optional<RedisReply> r) mutable {
    if (r && r->isError() && r->str.rfind("NOSCRIPT", 0) == 0) {
      // The server lost its script cache (a restart): EVAL sends the text and caches it.
      (*retry_args)[0] = "EVAL";
      (*retry_args)[1] = script;
      self->send(*retry_args, std::move(cb));
      return;
    }
    cb(std::move(r));
  });
}

bool RedisStore::start(std::string& error, std::vector<std::string>& warnings) {
  RedisEndpoint endpoint;
  if (auto e = parseRedisUrl(config_.url, endpoint)) {
    error = "store.redis.url: " + *e;
    return false;
  }
  control_io_ = std::make_unique<asio::io_context>(1);
  endpoint_text_ = config_.sentinels.empty() ? endpoint.host + ":" + std::to_string(endpoint.port)
                                             : "sentinel master " + config_.sentinel_master;
  endpoint_ = std::make_unique<RedisEndpoint>(std::move(endpoint));
  control_ = connection(*control_io_, std::max(config_.command_timeout, Millis(1'000)));
  // The subscriber waits for messages for ever; its timeout only bounds SUBSCRIBE itself.
  subscriber_ = connection(*control_io_, std::max(config_.command_timeout, Millis(1'000)));
  control_thread_ = std::thread([this] {
    auto guard = asio::make_work_guard(*control_io_);
    control_io_->run();
  });
  if (!config_.sentinels.empty()) {
    // The master first: every connection asks for it when it connects.
    auto asked = std::make_shared<std::promise<bool>>();
    auto answer = asked->get_future();
    asio::post(*control_io_, [this, asked] { querySentinels(0, [asked](bool ok) { asked->set_value(ok); }); });
    if (answer.wait_for(std::chrono::seconds(5)) != std::future_status::ready || !answer.get())
      warnings.push_back("no sentinel of store.redis.sentinel.addresses named a master \"" + config_.sentinel_master +
                         "\"; limits are per replica until one does");
  }

  // The first conversation, before anything is served: what the server keeps, and the records.
  struct Probe {
    std::optional<RedisReply> policy, aof, save;
    bool answered = false;
  };
  auto probe = std::make_shared<Probe>();
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  asio::post(*control_io_, [this, probe, done] {
    control_->send({"CONFIG", "GET", "maxmemory-policy"}, [probe](auto r) { probe->policy = std::move(r); });
    control_->send({"CONFIG", "GET", "appendonly"}, [probe](auto r) { probe->aof = std::move(r); });
    control_->send({"CONFIG", "GET", "save"}, [this, probe, done](auto r) {
      probe->save = std::move(r);
      probe->answered = probe->save.has_value();
      if (!probe->answered) {
        done->set_value();
        return;
      }
      // The records, loaded before the gateway builds its tenant directory.
      auto left = std::make_shared<int>(2);
      for (std::string_view ns : {std::string_view("tenants"), std::string_view("keys")})
        reloadRecords(ns, false, [left, done] {
          if (--*left == 0) done->set_value();
        });
    });
  });
  // The probe's own commands time out within a second; this wait is only a backstop.
  if (finished.wait_for(std::chrono::seconds(5)) != std::future_status::ready || !probe->answered) {
    warnings.push_back("Redis at " + endpoint_text_ + " does not answer (" + control_->lastError() +
                       "); limits are per replica until it does");
  } else {
    auto value = [](const std::optional<RedisReply>& r) -> std::optional<std::string> {
      if (!r || r->type != RedisReply::Type::Array || r->elements.size() != 2) return std::nullopt;
      return r->elements[1].str;
    };
    const auto policy = value(probe->policy), aof = value(probe->aof), save = value(probe->save);
    if (!policy || !aof || !save) {
      warnings.push_back("Redis at " + endpoint_text_ +
                         " does not allow CONFIG GET: cannot check that it persists and never evicts (see README)");
    } else if (config_.require_persistence) {
      if (*policy != "noeviction") {
        error = "Redis at " + endpoint_text_ + " has maxmemory-policy " + *policy +
                ": it may evict tenants, keys and quota counters, which cannot be rebuilt. Set noeviction (use a separate "
                "Redis for caches), or store.redis.require_persistence: false for a throwaway server";
      } else if (*aof != "yes" && save->empty()) {
        error = "Redis at " + endpoint_text_ +
                " persists nothing (appendonly no, save \"\"): tenants, keys and quotas would be lost with it. Turn on AOF "
                "or RDB, or set store.redis.require_persistence: false for a throwaway server";
      }
    }
    if (!error.empty()) return false;
    markUp(true, "");
  }
  asio::post(*control_io_, [this] {
    subscribe();
    controlTick();
  });
  return true;
}

void RedisStore::attach(asio::io_context& io) {
  t_connection = connection(io, config_.command_timeout);
  t_adjust = std::make_unique<AdjustBatch>();
  t_adjust->timer = std::make_unique<asio::steady_timer>(io);
}

std::shared_ptr<RedisConnection> RedisStore::connection(asio::io_context& io, Millis timeout) {
  auto conn = std::make_shared<RedisConnection>(io, currentEndpoint(), timeout);
  conn->onConnect([this] { return currentEndpoint(); });
  // The scripts are loaded on every new connection, so EVALSHA finds them (a server
  // restarted since is a new connection); NOSCRIPT after that (SCRIPT FLUSH) closes it.
  std::vector<std::vector<std::string>> load;
  for (const char* script : {redis_scripts::kAdmit, redis_scripts::kAdjust, redis_scripts::kHeartbeat, redis_scripts::kRenewLock,
                             redis_scripts::kUnlock})
    load.push_back({"SCRIPT", "LOAD", script});
  conn->onEveryConnect(std::move(load));
  return conn;
}

RedisEndpoint RedisStore::currentEndpoint() const {
  std::lock_guard lock(endpoint_mu_);
  return *endpoint_;
}

void RedisStore::querySentinels(std::size_t index, std::function<void(bool)> done) {
  if (index >= config_.sentinels.size()) {
    done(false);
    return;
  }
  const std::string& addr = config_.sentinels[index];
  RedisEndpoint sentinel;
  sentinel.host = addr.substr(0, addr.rfind(':'));
  sentinel.port = static_cast<std::uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1)));
  auto conn = std::make_shared<RedisConnection>(*control_io_, sentinel, std::max(config_.command_timeout, Millis(500)));
  conn->send({"SENTINEL", "get-master-addr-by-name", config_.sentinel_master},
             [this, conn, index, done = std::move(done)](std::optional<RedisReply> r) mutable {
               conn->close();
               if (!r || r->type != RedisReply::Type::Array || r->elements.size() != 2) {
                 querySentinels(index + 1, std::move(done));
                 return;
               }
               const std::string host = r->elements[0].str;
               int port = 0;
               std::from_chars(r->elements[1].str.data(), r->elements[1].str.data() + r->elements[1].str.size(), port);
               if (host.empty() || port <= 0 || port > 65535) {
                 querySentinels(index + 1, std::move(done));
                 return;
               }
               bool changed = false;
               {
                 std::lock_guard lock(endpoint_mu_);
                 changed = endpoint_->host != host || endpoint_->port != port;
                 endpoint_->host = host;
                 endpoint_->port = static_cast<std::uint16_t>(port);
               }
               if (changed) log::info("redis master (from sentinel)", {{"master", config_.sentinel_master}, {"address", host + ":" + std::to_string(port)}});
               done(true);
             });
}

void RedisStore::markUp(bool up, const char* why) {
  if (up_.exchange(up) == up) return;
  if (up)
    log::info("redis store available: limits are shared across replicas", {{"redis", endpoint_text_}});
  else
    log::warn("redis store unavailable: limiting per replica (shared limits divided by the replicas seen alive)",
              {{"redis", endpoint_text_}, {"reason", why}, {"replicas", replicas_.load()}});
}

void RedisStore::admit(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) {
  decide(checks, true, std::move(done));
}

void RedisStore::peek(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) {
  decide(checks, false, std::move(done));
}

void RedisStore::decide(std::span<const LimitCheck> checks, bool charge, std::function<void(const Admission&)> done) {
  checks = checks.first(std::min(checks.size(), Admission::kMaxChecks));
  RedisConnection* conn = t_connection.get();
  if (!conn || !conn->usable()) {
    decideLocally(checks, charge, done);
    return;
  }
  ArgScratch& a = t_args;
  a.begin(24 * (6 * checks.size() + 2));
  a.view("EVALSHA");
  a.view(admit_sha_);
  a.number(static_cast<std::int64_t>(checks.size()));
  for (const auto& c : checks) a.view(c.key);
  a.number(charge ? 1 : 0);
  for (const auto& c : checks) {
    a.number(static_cast<int>(c.spec.kind));
    a.number(c.spec.limit);
    a.number(c.spec.period_ms);
    a.number(static_cast<int>(c.spec.calendar));
    a.number(c.cost);
  }
  // The checks' keys are views of the caller's counter names, which outlive the request
  // (the filter chain the request pinned); only the array is copied.
  struct Call {
    std::array<LimitCheck, Admission::kMaxChecks> checks;
    std::size_t n = 0;
    bool charge = false;
    std::function<void(const Admission&)> done;
  };
  auto call = std::make_shared<Call>();
  std::copy(checks.begin(), checks.end(), call->checks.begin());
  call->n = checks.size();
  call->charge = charge;
  call->done = std::move(done);
  conn->send(a.finish(), [this, call, conn](std::optional<RedisReply> r) {
    Admission adm;
    if (unusableServer(r)) conn->close();
    const std::span<const LimitCheck> saved(call->checks.data(), call->n);
    if (!r || !parseAdmission(*r, call->n, adm)) {
      markUp(false, !r ? conn->lastError() : r->isError() ? "script error" : "unexpected reply");
      if (r && r->isError()) log::error("redis admission script failed", {{"error", r->str}});
      decideLocally(saved, call->charge, call->done);
      return;
    }
    markUp(true, "");
    call->done(adm);
  });
}

void RedisStore::decideLocally(std::span<const LimitCheck> checks, bool charge, const std::function<void(const Admission&)>& done) {
  // Each replica takes its share of every shared limit.
  const std::int64_t replicas = static_cast<std::int64_t>(std::max<std::uint64_t>(1, replicas_.load()));
  std::vector<LimitCheck> scaled(checks.begin(), checks.end());
  for (auto& c : scaled) c.spec.limit = std::max<std::int64_t>(1, (c.spec.limit + replicas - 1) / replicas);
  auto finish = [&](const Admission& local) {
    Admission a = local;
    a.local = true;
    for (std::size_t i = 0; i < a.count; ++i) {
      LimitDecision& d = a.decisions[i];
      // Too large for this replica's share, not for the limit: a wait (for Redis) helps.
      if (d.never && checks[i].cost <= checks[i].spec.limit) {
        d.never = false;
        d.retry_after_ms = 1'000;
      }
    }
    done(a);
  };
  if (charge) ++local_decisions_;
  if (charge) local_.admit(scaled, finish);
  else local_.peek(scaled, finish);
}

void RedisStore::adjust(const LimitCheck& check, std::int64_t charged_ms, std::int64_t delta, bool local) {
  if (delta == 0 || check.spec.kind == LimitKind::Window) return;
  if (local) {
    const std::int64_t replicas = static_cast<std::int64_t>(std::max<std::uint64_t>(1, replicas_.load()));
    LimitCheck scaled = check;
    scaled.spec.limit = std::max<std::int64_t>(1, (check.spec.limit + replicas - 1) / replicas);
    local_.adjust(scaled, charged_ms, delta, true);
    return;
  }
  AdjustBatch* batch = t_adjust.get();
  if (!batch) {  // not a worker's thread: straight to the control thread's retry list
    std::vector<std::string> args{"1", std::string(check.key)};
    for (auto& a : checkArgs(check)) args.push_back(std::move(a));
    args.push_back(std::to_string(charged_ms));
    args.push_back(std::to_string(delta));
    keepAdjustment(std::move(args));
    return;
  }
  std::string key(check.key);
  if (check.spec.kind == LimitKind::Quota) key += "#" + std::to_string(periodOf(check.spec.calendar, charged_ms).id);
  PendingAdjustment& p = batch->pending[key];
  if (p.delta == 0) {
    p.spec = check.spec;
    p.charged_ms = charged_ms;
  }
  p.delta += delta;
  if (batch->armed) return;
  batch->armed = true;
  batch->timer->expires_after(kAdjustEvery);
  batch->timer->async_wait([this](auto ec) {
    if (!ec) flushAdjustments();
  });
}

void RedisStore::flushAdjustments() {
  AdjustBatch& batch = *t_adjust;
  batch.armed = false;
  RedisConnection* conn = t_connection.get();
  // One script call per kAdjustPerCommand counters; what Redis does not take is kept
  // for the control thread to send later.
  std::vector<std::vector<std::string>> sent;
  auto send = [&] {
    if (sent.empty()) return;
    ArgScratch& a = t_args;
    a.begin(24 * 7 * sent.size());
    a.view("EVALSHA");
    a.view(adjust_sha_);
    a.number(static_cast<std::int64_t>(sent.size()));
    for (const auto& args : sent) a.view(args[1]);
    for (const auto& args : sent)
      for (std::size_t i = 2; i < args.size(); ++i) a.view(args[i]);
    auto kept = std::make_shared<std::vector<std::vector<std::string>>>(std::move(sent));
    sent.clear();
    if (!conn || !conn->usable()) {
      for (auto& args : *kept) keepAdjustment(std::move(args));
      return;
    }
    conn->send(a.finish(), [this, kept, conn](std::optional<RedisReply> r) {
      if (unusableServer(r)) conn->close();
      if (!r || r->isError())
        for (auto& args : *kept) keepAdjustment(std::move(args));
    });
  };
  for (auto& [key, p] : batch.pending) {
    if (p.delta == 0) continue;
    const std::string counter = key.substr(0, key.find('#'));
    LimitCheck c{counter, p.spec, 0};
    std::vector<std::string> args{"1", counter};
    for (auto& x : checkArgs(c)) args.push_back(std::move(x));
    args.push_back(std::to_string(p.charged_ms));
    args.push_back(std::to_string(p.delta));
    sent.push_back(std::move(args));
    p.delta = 0;
    if (sent.size() == kAdjustPerCommand) send();
  }
  send();
  // The counters stay in the map (no allocation next time), up to a bound.
  if (batch.pending.size() > 10'000) batch.pending.clear();
}

void RedisStore::keepAdjustment(std::vector<std::string> args) {
  std::lock_guard lock(mu_);
  if (kept_.size() >= kMaxKeptAdjustments) {
    if (dropped_++ == 0)
      log::error("redis store: calibrations waiting for Redis exceed 100,000; dropping the oldest (counted in "
                 "tahua_store_adjustments_dropped_total)");
    kept_.pop_front();
  }
  kept_.push_back(std::move(args));
}

void RedisStore::controlTick() {
  // Heartbeat: announce this replica and learn how many are alive.
  evalsha(*control_, heartbeat_sha_, redis_scripts::kHeartbeat,
          {"1", kReplicasKey, replica_id_, std::to_string(config_.replica_ttl.count())}, [this](std::optional<RedisReply> r) {
            if (r && r->type == RedisReply::Type::Integer && r->integer > 0) {
              replicas_ = static_cast<std::uint64_t>(r->integer);
              markUp(true, "");
              // Redis is back: send the calibrations kept meanwhile.
              std::deque<std::vector<std::string>> kept;
              {
                std::lock_guard lock(mu_);
                kept.swap(kept_);
              }
              for (auto& args : kept) {
                auto copy = std::make_shared<std::vector<std::string>>(args);
                evalsha(*control_, adjust_sha_, redis_scripts::kAdjust, std::move(args), [this, copy](std::optional<RedisReply> r) {
                  if (!r || r->isError()) keepAdjustment(std::move(*copy));
                });
              }
            } else {
              if (unusableServer(r)) control_->close();
              markUp(false, r && r->isError() ? "the server refused (a replica, or loading)" : control_->lastError());
            }
          });
  // Sentinel: who is master now (every fifth tick, and every tick while Redis is away).
  if (!config_.sentinels.empty() && (!up_.load() || ++ticks_ % 5 == 0))
    querySentinels(0, [](bool) {});
  // The subscriber reconnects (and the records are reloaded: messages were missed).
  if (!subscriber_->up() && subscriber_->usable()) {
    subscribe();
    for (std::string_view ns : {std::string_view("tenants"), std::string_view("keys")}) reloadRecords(ns, true, {});
  }
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_resync_) {
    next_resync_ = now + config_.resync;
    for (std::string_view ns : {std::string_view("tenants"), std::string_view("keys")}) reloadRecords(ns, true, {});
  }
  auto timer = std::make_shared<asio::steady_timer>(*control_io_, config_.heartbeat);
  timer->async_wait([this, timer](auto ec) {
    if (!ec) controlTick();
  });
}

void RedisStore::subscribe() {
  subscriber_->onPush([this](const RedisReply& r) {
    // ["message", channel, ns]: another replica (or this one) changed records of `ns`.
    if (r.type == RedisReply::Type::Array && r.elements.size() == 3 && r.elements[0].str == "message")
      reloadRecords(r.elements[2].str, true, {});
  });
  subscriber_->send({"SUBSCRIBE", kChangesChannel}, [](std::optional<RedisReply>) {});
}

void RedisStore::reloadRecords(std::string_view ns, bool notify, std::function<void()> then) {
  if (ns != "tenants" && ns != "keys") {
    if (then) then();
    return;
  }
  std::string name(ns);
  control_->send({"HGETALL", std::string(kRecordsPrefix) + name}, [this, name, notify, then = std::move(then)](std::optional<RedisReply> r) {
    if (r && r->type == RedisReply::Type::Array && r->elements.size() % 2 == 0) {
      std::vector<Record> fresh;
      for (std::size_t i = 0; i + 1 < r->elements.size(); i += 2) fresh.push_back({r->elements[i].str, r->elements[i + 1].str});
      std::sort(fresh.begin(), fresh.end(), [](const Record& a, const Record& b) { return a.id < b.id; });
      bool changed = false;
      std::vector<std::function<void()>> listeners;
      {
        std::lock_guard lock(mu_);
        auto& current = records_[name];
        changed = current.size() != fresh.size();
        for (std::size_t i = 0; !changed && i < fresh.size(); ++i)
          changed = current[i].id != fresh[i].id || current[i].json != fresh[i].json;
        if (changed) current = std::move(fresh);
        listeners = listeners_;
      }
      if (changed && notify)
        for (auto& fn : listeners) fn();
    }
    if (then) then();
  });
}

std::vector<StateStore::Record> RedisStore::records(std::string_view ns) const {
  std::lock_guard lock(mu_);
  auto it = records_.find(ns);
  return it == records_.end() ? std::vector<Record>{} : it->second;
}

void RedisStore::putRecord(std::string_view ns, std::string_view id, std::string json, WriteDone done) {
  asio::post(*control_io_, [this, ns = std::string(ns), id = std::string(id), json = std::move(json), done = std::move(done)]() mutable {
    control_->send({"HSET", std::string(kRecordsPrefix) + ns, id, json},
                   [this, ns, id, json, done = std::move(done)](std::optional<RedisReply> r) mutable {
                     if (!r || r->isError()) {
                       done("the Redis store did not take the change (" + std::string(r ? r->str : control_->lastError()) +
                            "); nothing was changed");
                       return;
                     }
                     {
                       std::lock_guard lock(mu_);
                       auto& list = records_[ns];
                       auto it = std::find_if(list.begin(), list.end(), [&](const Record& x) { return x.id == id; });
                       if (it != list.end()) it->json = json;
                       else {
                         list.push_back({id, json});
                         std::sort(list.begin(), list.end(), [](const Record& a, const Record& b) { return a.id < b.id; });
                       }
                     }
                     control_->send({"PUBLISH", kChangesChannel, ns}, [](std::optional<RedisReply>) {});
                     done(std::nullopt);
                   });
  });
}

void RedisStore::eraseRecord(std::string_view ns, std::string_view id, WriteDone done) {
  asio::post(*control_io_, [this, ns = std::string(ns), id = std::string(id), done = std::move(done)]() mutable {
    control_->send({"HDEL", std::string(kRecordsPrefix) + ns, id},
                   [this, ns, id, done = std::move(done)](std::optional<RedisReply> r) mutable {
                     if (!r || r->isError()) {
                       done("the Redis store did not take the change (" + std::string(r ? r->str : control_->lastError()) +
                            "); nothing was changed");
                       return;
                     }
                     {
                       std::lock_guard lock(mu_);
                       auto& list = records_[ns];
                       std::erase_if(list, [&](const Record& x) { return x.id == id; });
                     }
                     control_->send({"PUBLISH", kChangesChannel, ns}, [](std::optional<RedisReply>) {});
                     done(std::nullopt);
                   });
  });
}

void RedisStore::onRecordsChanged(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  listeners_.push_back(std::move(fn));
}

// An answer is one string value (JSON, the body in base64) set with its TTL in one
// command: no state without an expiry, whatever happens between two commands.
void RedisStore::getIdempotent(std::string_view key, std::function<void(std::optional<Idempotent>)> done) {
  RedisConnection* conn = t_connection.get();
  if (!conn || !conn->usable()) {
    local_.getIdempotent(key, std::move(done));
    return;
  }
  std::string k(key);
  conn->send({"GET", k}, [this, k, done = std::move(done)](std::optional<RedisReply> r) mutable {
    if (!r || r->isError()) {
      local_.getIdempotent(k, std::move(done));
      return;
    }
    Idempotent out;
    if (r->type == RedisReply::Type::String) {
      boost::system::error_code ec;
      auto v = boost::json::parse(r->str, ec);
      const auto* o = ec ? nullptr : v.if_object();
      auto text = [&](std::string_view f) { return o && o->contains(f) && o->at(f).is_string() ? std::string(o->at(f).as_string()) : std::string(); };
      auto body = base64Decode(text("body"));
      if (o && body && o->contains("status") && o->at("status").is_int64()) {
        out.fingerprint = text("fingerprint");
        out.content_type = text("content_type");
        out.status = static_cast<int>(o->at("status").as_int64());
        out.body = std::move(*body);
      }
    }
    done(std::move(out));
  });
}

void RedisStore::putIdempotent(std::string_view key, Idempotent record, Millis ttl) {
  RedisConnection* conn = t_connection.get();
  if (!conn || !conn->usable()) {
    local_.putIdempotent(key, std::move(record), ttl);
    return;
  }
  const std::string value = boost::json::serialize(boost::json::object{{"fingerprint", record.fingerprint},
                                                                       {"status", record.status},
                                                                       {"content_type", record.content_type},
                                                                       {"body", base64Encode(record.body)}});
  auto kept = std::make_shared<Idempotent>(std::move(record));
  std::string k(key);
  conn->send({"SET", k, value, "PX", std::to_string(ttl.count())}, [this, k, kept, ttl](std::optional<RedisReply> r) {
    if (!r || r->isError()) local_.putIdempotent(k, std::move(*kept), ttl);  // this replica keeps it at least
  });
}

void RedisStore::tryLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) {
  RedisConnection* conn = t_connection.get();
  if (!conn || !conn->usable()) {
    local_.tryLock(name, owner, ttl, std::move(done));
    return;
  }
  std::string n(name), o(owner);
  conn->send({"SET", n, o, "NX", "PX", std::to_string(ttl.count())}, [this, n, o, ttl, done = std::move(done)](std::optional<RedisReply> r) mutable {
    if (!r || r->isError()) {
      local_.tryLock(n, o, ttl, std::move(done));
      return;
    }
    done(r->type == RedisReply::Type::Status && r->str == "OK");
  });
}

void RedisStore::renewLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) {
  RedisConnection* conn = t_connection.get();
  if (!conn || !conn->usable()) {
    local_.renewLock(name, owner, ttl, std::move(done));
    return;
  }
  std::string n(name), o(owner);
  evalsha(*conn, renew_sha_, redis_scripts::kRenewLock, {"1", n, o, std::to_string(ttl.count())},
          [this, n, o, ttl, done = std::move(done)](std::optional<RedisReply> r) mutable {
            if (!r || r->isError()) {
              local_.renewLock(n, o, ttl, std::move(done));
              return;
            }
            done(r->type == RedisReply::Type::Integer && r->integer == 1);
          });
}

void RedisStore::unlock(std::string_view name, std::string_view owner) {
  local_.unlock(name, owner);  // it may have been taken here while Redis was away
  RedisConnection* conn = t_connection.get();
  if (!conn || !conn->usable()) return;  // the lock expires by its TTL
  evalsha(*conn, unlock_sha_, redis_scripts::kUnlock, {"1", std::string(name), std::string(owner)}, [](std::optional<RedisReply>) {});
}

StateStore::Stats RedisStore::stats() const {
  Stats s;
  s.shared = true;
  s.up = up_.load();
  s.local_decisions = local_decisions_.load();
  s.replicas = replicas_.load();
  s.adjustments_dropped = dropped_.load();
  std::lock_guard lock(mu_);
  s.adjustments_pending = kept_.size();
  return s;
}

}  // namespace tahua
