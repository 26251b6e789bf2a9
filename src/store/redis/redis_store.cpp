// The Redis store's start, connections, Sentinel, heartbeats and figures. Decisions and
// calibrations are in redis_limits.cpp, records, idempotency answers and locks in
// redis_records.cpp.
#include "store/redis/redis_store.h"

#include <openssl/rand.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>

#include "core/log.h"
#include "core/sha256.h"
#include "store/redis/redis_client.h"
#include "store/redis/redis_connection.h"
#include "store/redis/redis_detail.h"
#include "store/redis/redis_scripts.h"
#include "core/thread_name.h"
#include <future>
#include <thread>

namespace tahua {
namespace asio = boost::asio;
using namespace redis_detail;

namespace redis_detail {

std::shared_ptr<RedisClient>& workerClient() {
  thread_local std::shared_ptr<RedisClient> connection;
  return connection;
}

ArgScratch& argScratch() {
  thread_local ArgScratch scratch;
  return scratch;
}

std::unique_ptr<Leases>& workerLeases() {
  thread_local std::unique_ptr<Leases> leases;
  return leases;
}

std::unique_ptr<AdjustBatch>& adjustBatch() {
  thread_local std::unique_ptr<AdjustBatch> batch;
  return batch;
}

std::vector<std::string> checkArgs(const LimitCheck& c) {
  return {std::to_string(static_cast<int>(c.spec.kind)), std::to_string(c.spec.limit), std::to_string(c.spec.period_ms),
          std::to_string(static_cast<int>(c.spec.calendar))};
}

}  // namespace redis_detail

namespace {

std::string replicaId() {
  char host[128] = {};
  gethostname(host, sizeof host - 1);
  unsigned char rnd[4];
  RAND_bytes(rnd, sizeof rnd);
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
  return std::string(host) + ":" + std::to_string(getpid()) + ":" + suffix;
}

}  // namespace

RedisStore::RedisStore(RedisStoreConfig config)
    : config_(std::move(config)),
      replica_id_(replicaId()),
      admit_sha_(sha1Hex(redis_scripts::kAdmit)),
      adjust_sha_(sha1Hex(redis_scripts::kAdjust)),
      undo_admit_sha_(sha1Hex(redis_scripts::kUndoAdmit)),
      heartbeat_sha_(sha1Hex(redis_scripts::kHeartbeat)),
      renew_sha_(sha1Hex(redis_scripts::kRenewLock)),
      unlock_sha_(sha1Hex(redis_scripts::kUnlock)),
      put_grouped_sha_(sha1Hex(redis_scripts::kPutGrouped)),
      erase_grouped_sha_(sha1Hex(redis_scripts::kEraseGrouped)) {}

RedisStore::~RedisStore() {
  if (control_io_) {
    // What Redis has not taken yet (the workers' last calibrations, sent as they stopped,
    // and whatever a timeout or an outage kept) gets one more try, bounded: a call that
    // merely timed out under load is not lost with the process. Its marker keeps a call
    // Redis applied before from counting twice.
    // (A call failed by another's timeout on the same connection is tried again.)
    const auto until = std::chrono::steady_clock::now() + 2 * std::max(config_.command_timeout, Millis(1'000));
    const auto anyKept = [this] {
      std::lock_guard lock(mu_);
      return !kept_.empty();
    };
    for (bool first = true; anyKept() && std::chrono::steady_clock::now() < until; first = false) {
      if (!first) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a reconnect's pace
      auto sent = std::make_shared<std::promise<void>>();
      auto finished = sent->get_future();
      asio::post(*control_io_, [this, sent] { sendKept([sent] { sent->set_value(); }); });
      if (finished.wait_until(until) != std::future_status::ready) break;
    }
    control_io_->stop();
  }
  if (control_thread_.joinable()) control_thread_.join();
  // Said, not silently lost: usage Redis never took (it was away until the end), or may
  // not have (sent, unanswered at the deadline).
  if (!kept_.empty() || kept_in_flight_ > 0)
    log::error("redis store: calibrations not delivered before exit (Redis unavailable)",
               {{"count", kept_.size() + kept_in_flight_}, {"unanswered", kept_in_flight_}});
}

void RedisStore::evalsha(RedisClient& conn, const std::string& sha, const char* script, std::vector<std::string> args,
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
  useCredentials(config_.auth, endpoint);
  control_io_ = std::make_unique<asio::io_context>(1);
  endpoint_text_ = !config_.cluster_nodes.empty() ? "cluster " + config_.cluster_nodes.front()
                   : config_.sentinels.empty()    ? endpoint.host + ":" + std::to_string(endpoint.port)
                                                  : "sentinel master " + config_.sentinel_master;
  for (const auto& node : config_.cluster_nodes) {
    RedisEndpoint seed = endpoint;
    seed.host = node.substr(0, node.rfind(':'));
    if (seed.host.size() > 2 && seed.host.front() == '[' && seed.host.back() == ']') seed.host = seed.host.substr(1, seed.host.size() - 2);
    seed.port = static_cast<std::uint16_t>(std::stoi(node.substr(node.rfind(':') + 1)));
    cluster_seeds_.push_back(std::move(seed));
  }
  endpoint_ = std::make_unique<RedisEndpoint>(std::move(endpoint));
  control_ = connection(*control_io_, std::max(config_.command_timeout, Millis(1'000)));
  // The subscriber waits for messages for ever; its timeout only bounds SUBSCRIBE itself.
  // In a cluster any node will do (a PUBLISH reaches every node's subscribers): the
  // configured ones in turn, one per reconnect.
  subscriber_ = nodeConnection(*control_io_, currentEndpoint(), std::max(config_.command_timeout, Millis(1'000)));
  if (!cluster_seeds_.empty())
    subscriber_->onConnect([this] { return cluster_seeds_[next_seed_++ % cluster_seeds_.size()]; });
  else
    subscriber_->onConnect([this] { return currentEndpoint(); });
  control_thread_ = std::thread([this] {
    nameThisThread("tahua-redis");
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

  if (!probeServers(error, warnings)) return false;
  asio::post(*control_io_, [this] {
    subscribe();
    controlTick();
  });
  return true;
}

// The first conversation, before anything is served: what each server keeps (in a
// cluster, every master), then the records. False only when a server refuses what the
// config requires; one that does not answer is warned about.
bool RedisStore::probeServers(std::string& error, std::vector<std::string>& warnings) {
  struct Probe {
    std::vector<std::string> nodes;  // "" for the one server
    std::vector<std::optional<RedisReply>> replies;  // three per node: maxmemory-policy, appendonly, save
    bool answered = false;
  };
  auto probe = std::make_shared<Probe>();
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  asio::post(*control_io_, [this, probe, done] {
    control_->refreshSlots([this, probe, done](bool) {
      probe->nodes = control_->nodes();
      probe->replies.resize(3 * probe->nodes.size());
      if (probe->nodes.empty()) return done->set_value();
      auto left = std::make_shared<std::size_t>(probe->replies.size());
      auto answered = [this, probe, done, left](std::size_t i, std::optional<RedisReply> r) {
        probe->replies[i] = std::move(r);
        if (--*left > 0) return;
        probe->answered = std::all_of(probe->replies.begin(), probe->replies.end(), [](const auto& x) { return x.has_value(); });
        if (!probe->answered) return done->set_value();
        // The records, loaded before the gateway builds its tenant directory.
        auto loads = std::make_shared<std::size_t>(std::size(kNamespaces));
        for (std::string_view ns : kNamespaces)
          reloadRecords(ns, false, [loads, done] {
            if (--*loads == 0) done->set_value();
          });
      };
      for (std::size_t n = 0; n < probe->nodes.size(); ++n) {
        control_->sendToNode(n, {"CONFIG", "GET", "maxmemory-policy"}, [answered, n](auto r) { answered(3 * n, std::move(r)); });
        control_->sendToNode(n, {"CONFIG", "GET", "appendonly"}, [answered, n](auto r) { answered(3 * n + 1, std::move(r)); });
        control_->sendToNode(n, {"CONFIG", "GET", "save"}, [answered, n](auto r) { answered(3 * n + 2, std::move(r)); });
      }
    });
  });
  // The probe's own commands time out within a second; this wait is only a backstop.
  if (finished.wait_for(std::chrono::seconds(5)) != std::future_status::ready || !probe->answered) {
    warnings.push_back("Redis at " + endpoint_text_ + " does not answer (" + control_->lastError() +
                       "); limits are per replica until it does");
    return true;
  }
  auto value = [](const std::optional<RedisReply>& r) -> std::optional<std::string> {
    if (!r || r->type != RedisReply::Type::Array || r->elements.size() != 2) return std::nullopt;
    return r->elements[1].str;
  };
  for (std::size_t n = 0; n < probe->nodes.size() && error.empty(); ++n) {
    const std::string server = probe->nodes[n].empty() ? endpoint_text_ : probe->nodes[n];
    const auto policy = value(probe->replies[3 * n]), aof = value(probe->replies[3 * n + 1]), save = value(probe->replies[3 * n + 2]);
    if (!policy || !aof || !save) {
      warnings.push_back("Redis at " + server +
                         " does not allow CONFIG GET: cannot check that it persists and never evicts (see docs/tenants-and-limits.md)");
    } else if (config_.require_persistence) {
      if (*policy != "noeviction") {
        error = "Redis at " + server + " has maxmemory-policy " + *policy +
                ": it may evict tenants, keys and quota counters, which cannot be rebuilt. Set noeviction (use a separate "
                "Redis for caches), or store.redis.require_persistence: false for a throwaway server";
      } else if (*aof != "yes" && save->empty()) {
        error = "Redis at " + server +
                " persists nothing (appendonly no, save \"\"): tenants, keys and quotas would be lost with it. Turn on AOF "
                "or RDB, or set store.redis.require_persistence: false for a throwaway server";
      }
    }
  }
  if (!error.empty()) return false;
  markUp(true, "");
  return true;
}

void RedisStore::attach(asio::io_context& io) {
  workerClient() = connection(io, config_.command_timeout);
  adjustBatch() = std::make_unique<AdjustBatch>();
  adjustBatch()->timer = std::make_unique<asio::steady_timer>(io);
  workerLeases() = std::make_unique<Leases>();
  workerLeases()->sweep = std::make_unique<asio::steady_timer>(io);
  ++workers_;
}

std::shared_ptr<RedisClient> RedisStore::connection(asio::io_context& io, Millis timeout) {
  if (!cluster_seeds_.empty())
    return std::make_shared<RedisClient>(cluster_seeds_, [this, &io, timeout](const RedisEndpoint& at) {
      return nodeConnection(io, at, timeout);
    });
  auto conn = nodeConnection(io, currentEndpoint(), timeout);
  conn->onConnect([this] { return currentEndpoint(); });  // with Sentinel: the master named now
  return std::make_shared<RedisClient>(std::move(conn));
}

std::shared_ptr<RedisConnection> RedisStore::nodeConnection(asio::io_context& io, const RedisEndpoint& at, Millis timeout) {
  auto conn = std::make_shared<RedisConnection>(io, at, timeout);
  // The scripts are loaded on every new connection, so EVALSHA finds them (a server
  // restarted since is a new connection); NOSCRIPT after that (SCRIPT FLUSH) closes it.
  std::vector<std::vector<std::string>> load;
  // Every script: one missing here costs its first call per connection a NOSCRIPT and
  // a second round trip with the whole text (a stored response's write, held by its answer).
  for (const char* script : {redis_scripts::kAdmit, redis_scripts::kAdjust, redis_scripts::kUndoAdmit, redis_scripts::kHeartbeat,
                             redis_scripts::kRenewLock, redis_scripts::kUnlock, redis_scripts::kPutGrouped,
                             redis_scripts::kEraseGrouped})
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
  useCredentials(config_.sentinel_auth, sentinel);
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

void RedisStore::sendKept(std::function<void()> done) {
  std::deque<KeptCall> kept;
  {
    std::lock_guard lock(mu_);
    kept.swap(kept_);
    kept_in_flight_ += kept.size();
  }
  auto left = std::make_shared<std::size_t>(kept.size() + 1);
  auto one = [left, done = std::make_shared<std::function<void()>>(std::move(done))] {
    if (--*left == 0 && *done) (*done)();
  };
  for (auto& call : kept) {
    auto copy = std::make_shared<KeptCall>(call);
    evalsha(*control_, call.undo ? undo_admit_sha_ : adjust_sha_, call.undo ? redis_scripts::kUndoAdmit : redis_scripts::kAdjust,
            std::move(call.args), [this, copy, one](std::optional<RedisReply> r) {
              {
                std::lock_guard lock(mu_);
                --kept_in_flight_;
              }
              if (!r || r->isError()) keepAdjustment(std::move(copy->args), copy->undo);
              one();
            });
  }
  one();
}

void RedisStore::markUp(bool up, const char* why) {
  if (up_.exchange(up) == up) return;
  if (up)
    log::info("redis store available: limits are shared across replicas", {{"redis", endpoint_text_}});
  else
    log::warn("redis store unavailable: limiting per replica (shared limits divided by the replicas seen alive)",
              {{"redis", endpoint_text_}, {"reason", why}, {"replicas", replicas_.load()}});
}

void RedisStore::controlTick() {
  // Heartbeat: announce this replica and learn how many are alive.
  evalsha(*control_, heartbeat_sha_, redis_scripts::kHeartbeat,
          {"1", kReplicasKey, replica_id_, std::to_string(config_.replica_ttl.count())}, [this](std::optional<RedisReply> r) {
            if (r && r->type == RedisReply::Type::Integer && r->integer > 0) {
              replicas_ = static_cast<std::uint64_t>(r->integer);
              markUp(true, "");
              // Redis is back: send the calibrations kept meanwhile.
              sendKept({});
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
    if (ids_) ids_->distrust();  // writes may go unheard until the subscription is back and the filter rebuilt
    subscribe();
    for (std::string_view ns : kNamespaces) reloadRecords(ns, true, {});
  }
  // Sized for so many ids: past them (expired ones included) it is rebuilt from the live set.
  if (ids_ && ids_->ready() && ids_->ids() > ids_->capacity()) {
    log::warn("redis store: the lookup filter holds more ids than store.lookups.expected_ids; rebuilding",
              {{"ids", ids_->ids()}, {"expected_ids", ids_->capacity()}});
    rebuildIds();
  }
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_resync_) {
    next_resync_ = now + config_.resync;
    for (std::string_view ns : kNamespaces) reloadRecords(ns, true, {});
  }
  auto timer = std::make_shared<asio::steady_timer>(*control_io_, config_.heartbeat);
  timer->async_wait([this, timer](auto ec) {
    if (!ec) controlTick();
  });
}

StateStore::Stats RedisStore::stats() const {
  Stats s;
  s.shared = true;
  s.up = up_.load();
  s.local_decisions = local_decisions_.load();
  s.replicas = replicas_.load();
  s.adjustments_dropped = dropped_.load();
  s.lease_admissions = leased_.load();
  s.lease_renewals = renewals_.load();
  s.lease_waits = waited_.load();
  s.admissions_undone = undone_admissions_.load();
  s.lookups_filtered = lookups_filtered_.load();
  s.lookups_cached = lookups_cached_.load();
  s.lookups_asked = lookups_asked_.load();
  s.id_filter = ids_ != nullptr;
  s.id_filter_ready = ids_ && ids_->ready();
  s.id_filter_ids = ids_ ? ids_->ids() : 0;
  std::lock_guard lock(mu_);
  s.adjustments_pending = kept_.size() + kept_in_flight_;
  return s;
}

}  // namespace tahua
