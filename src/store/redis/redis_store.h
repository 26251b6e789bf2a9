// The Redis state store: every replica shares its counters and records through one
// Redis server. Each worker has its own pipelined connection on its own io_context (a
// limit decision is one EVALSHA, answered on the worker's thread, no lock); a control
// thread keeps a connection for records and heartbeats and a subscriber for change
// notifications.
//
// When Redis does not answer within the command timeout (or is known to be down), a
// decision is made at once by a local store with every limit divided by the replicas
// seen alive, counted, and logged once per change of state; calibrations for Redis are
// kept (bounded) and sent when it is back. Nothing waits on a dead server.
//
// With Sentinel every connection asks where the master is when it connects; with a
// Redis Cluster every command goes to its slot's master (RedisClient), and a request
// whose counters span slots is decided by one script per slot, the charged ones
// refunded when another refuses (docs/tenants-and-limits.md).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "store/memory_store.h"
#include "store/id_filter.h"
#include "store/state_store.h"

namespace boost::asio {
class io_context;
}

namespace tahua {

class RedisConnection;
class RedisClient;
namespace redis_detail {
struct Lease;
}
using redis_detail::Lease;
struct RedisReply;
struct RedisEndpoint;

class RedisStore final : public StateStore {
 public:
  explicit RedisStore(RedisStoreConfig config);
  ~RedisStore() override;

  // Connects (waiting up to a few seconds), checks the server's persistence and
  // eviction policy, loads the records and starts the control thread. False with
  // `error` when the server refuses what the config requires; an unreachable server
  // is not an error (warned about: limits start local and turn shared once it answers).
  // Before start(): a Bloom filter and a cache of misses in front of getValue (not in a
  // cluster: the scan that builds it would have to visit every master; lookups there
  // always ask).
  void filterLookups(const LookupFilterConfig& config);
  // Before start(): this fleet is region `name` (config `region`): a record is written with
  // its hybrid-logical-clock time (store/redis/region_scripts.h), for the region link.
  void setRegion(std::string name) { region_ = std::move(name); }
  bool start(std::string& error, std::vector<std::string>& warnings);
  // Gives the calling thread (a worker, running `io`) its own connection.
  void attach(boost::asio::io_context& io);

  void admit(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) override;
  void peek(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) override;
  void adjust(const LimitCheck& check, std::int64_t charged_ms, std::int64_t delta, bool local) override;

  std::vector<Record> records(std::string_view ns) const override;
  void putRecord(std::string_view ns, std::string_view id, std::string json, WriteDone done) override;
  void eraseRecord(std::string_view ns, std::string_view id, WriteDone done) override;
  void onRecordsChanged(std::function<void()> fn) override;
  void appendLog(std::string_view log, std::string json, std::size_t keep, WriteDone done) override;
  void readLog(std::string_view log, std::string_view before, std::size_t count, std::function<void(LogPage)> done) override;

  Stats stats() const override;
  void flushWorker(std::function<void()> done) override;

  void getIdempotent(std::string_view key, std::function<void(std::optional<Idempotent>)> done) override;
  void putIdempotent(std::string_view key, Idempotent record, Millis ttl) override;
  void getValue(std::string_view key, std::function<void(ValueResult)> done) override { lookup(key, std::move(done), true); }
  void getFreshValue(std::string_view key, std::function<void(ValueResult)> done) override { lookup(key, std::move(done), false); }
  void putValue(std::string_view key, std::string value, Millis ttl, WriteDone done) override;
  void eraseValue(std::string_view key, WriteDone done) override;
  void putGroupedValue(std::string_view key, std::string value, Millis ttl, ValueGroup group, WriteDone done) override;
  void eraseGroupedValue(std::string_view key, std::string_view group, WriteDone done) override;
  void tryLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) override;
  void renewLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) override;
  void unlock(std::string_view name, std::string_view owner) override;

 private:
  // `may_wait`: a charge the leases cannot take now may wait for a grant already on its
  // way (Leases::waiting) instead of asking Redis.
  void decide(std::span<const LimitCheck> checks, bool charge, std::function<void(const Admission&)> done, bool may_wait = true);
  // Whether every counter of `checks` has room in its lease or a grant coming, one at least
  // the latter (and there is room to wait).
  bool grantComing(std::span<const LimitCheck> checks);
  // The waiting admissions, after an answer to a call that asked for leases.
  void admitWaiting();
  // A request admitted from this worker's leases, if every counter has one with room.
  bool admitFromLeases(std::span<const LimitCheck> checks, const std::function<void(const Admission&)>& done);
  // How much more than its cost to ask for a counter (0: no lease).
  std::int64_t leaseWant(const LimitCheck& check);
  // An admission charged what `charged` says: the part beyond each cost becomes a lease.
  void recordGrants(std::span<const LimitCheck> checks, const std::int64_t* charged, Admission& a);
  void leaseAsked(std::span<const LimitCheck> checks, const std::int64_t* want, bool answered);
  // Asks Redis for more of these leases (cost 0) without a request waiting for the answer:
  // called when a lease in use nears its end or runs low, so that no request with room in
  // its limits waits for Redis.
  void renewLeases(std::span<const LimitCheck> checks);
  void returnLease(std::string_view key, Lease& lease);
  void sweepLeases();
  void decideLocally(std::span<const LimitCheck> checks, bool charge, const std::function<void(const Admission&)>& done);
  void markUp(bool up, const char* why);
  // Sends `args` as EVALSHA of `script` on `conn`; on NOSCRIPT, as EVAL (which loads it).
  static void evalsha(RedisClient& conn, const std::string& sha, const char* script, std::vector<std::string> args,
                      std::function<void(std::optional<RedisReply>)> cb);
  // Control thread.
  void controlTick();
  void reloadRecords(std::string_view ns, bool notify, std::function<void()> then);
  void writeRecord(std::string ns, std::string id, std::optional<std::string> json, WriteDone done);
  void scanRecords(std::string name, std::string cursor, std::shared_ptr<std::vector<Record>> fresh, bool notify,
                   std::function<void()> then, unsigned pages);
  void subscribe();
  // The id filter, rebuilt from a scan of every value's key (after a (re)subscription:
  // changes may have been missed); trusted once the scan ends with the subscription up.
  void rebuildIds();
  // getValue; `filtered`: the id filter may answer "missing".
  void lookup(std::string_view key, std::function<void(ValueResult)> done, bool filtered);
  void scanIds(std::string cursor, std::uint64_t epoch, unsigned pages);
  // A kAdjust call's arguments (numkeys, counters, marker, ...), kept until Redis answers
  // (`undo`: a kUndoAdmit call's).
  void keepAdjustment(std::vector<std::string> args, bool undo = false);
  // Sends every kept call on the control connection (what fails is kept again); `done`
  // once each is answered or failed. On the control thread.
  void sendKept(std::function<void()> done);
  // A call's marker key, unique per call, in `counter`'s cluster slot; `kind` "adj" (a
  // calibration) or "adm" (an admission that may have to be undone).
  std::string adjustmentMarker(std::string_view counter, std::string_view kind = "adj");
  // An admission sent with `marker` whose answer was lost: it may have charged. Undone in
  // Redis (kUndoAdmit, kept until Redis answers) whether or not it was applied yet.
  void undoAdmission(std::span<const LimitCheck> checks, std::string marker);
  // This worker's summed calibrations, as one script call; `done` once answered.
  void flushAdjustments(std::function<void()> done = {});
  // Sentinel: asks the sentinels in turn which server is the master now; `done(true)`
  // if one answered. On the control thread.
  void querySentinels(std::size_t index, std::function<void(bool)> done);
  RedisEndpoint currentEndpoint() const;
  // A client for `io`: one server's connection, or a cluster's.
  std::shared_ptr<RedisClient> connection(boost::asio::io_context& io, Millis timeout);
  std::shared_ptr<RedisConnection> nodeConnection(boost::asio::io_context& io, const RedisEndpoint& at, Millis timeout);
  // A request whose counters live in several cluster slots: one script per slot.
  void decideAcrossSlots(RedisClient& conn, std::span<const LimitCheck> checks, bool charge,
                         std::function<void(const Admission&)> done);
  // Queues a calibration of a counter charged in Redis (batched per worker).
  void queueAdjustment(const LimitCheck& check, std::int64_t charged_ms, std::int64_t delta);
  bool probeServers(std::string& error, std::vector<std::string>& warnings);

  RedisStoreConfig config_;
  std::string region_;  // empty: one region
  std::unique_ptr<RedisEndpoint> endpoint_;  // from the url; with Sentinel the master's address replaces its host and port
  std::vector<RedisEndpoint> cluster_seeds_;  // cluster: the configured nodes (with the url's credentials)
  std::atomic<std::size_t> next_seed_{0};     // cluster: where the subscriber connects next
  mutable std::mutex endpoint_mu_;
  std::string endpoint_text_;  // host:port, for logs (never the password)
  unsigned ticks_ = 0;
  std::string replica_id_;
  std::atomic<std::uint64_t> adjustment_calls_{0};  // numbers the calibration calls' markers
  std::chrono::steady_clock::time_point next_resync_{};
  std::string admit_sha_, adjust_sha_, undo_admit_sha_, heartbeat_sha_, renew_sha_, unlock_sha_, put_grouped_sha_, erase_grouped_sha_;

  MemoryStore local_;  // decisions while Redis is unreachable
  std::atomic<bool> up_{false};
  std::atomic<std::uint64_t> local_decisions_{0};
  std::atomic<std::uint64_t> replicas_{1};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> workers_{0};  // attached: a lease is a share of limit / (replicas x workers)
  std::atomic<std::uint64_t> leased_{0};   // admissions from a lease (no round trip)
  std::atomic<std::uint64_t> renewals_{0};  // leases renewed ahead of their end
  std::atomic<std::uint64_t> waited_{0};    // admissions that waited for a grant on its way
  std::atomic<std::uint64_t> undone_admissions_{0};
  std::unique_ptr<IdFilter> ids_;           // null: no filter
  std::atomic<std::uint64_t> ids_epoch_{0};  // a rebuild's; a newer one supersedes it
  std::atomic<std::uint64_t> lookups_filtered_{0}, lookups_cached_{0}, lookups_asked_{0};

  std::unique_ptr<boost::asio::io_context> control_io_;
  std::shared_ptr<RedisClient> control_;
  std::shared_ptr<RedisConnection> subscriber_;
  std::thread control_thread_;

  mutable std::mutex mu_;  // records_, listeners_, kept_, kept_in_flight_
  std::map<std::string, std::vector<Record>, std::less<>> records_;
  std::vector<std::function<void()>> listeners_;
  struct KeptCall {
    std::vector<std::string> args;
    bool undo = false;  // kUndoAdmit (else kAdjust)
  };
  std::deque<KeptCall> kept_;  // calibrations and undone admissions waiting for Redis
  std::size_t kept_in_flight_ = 0;  // of those, sent again and not answered yet
};

}  // namespace tahua
