// The one interface for state shared by every replica of the gateway: limit counters
// now; keys, tenants, idempotency records and locks as they arrive. Two implementations:
// in-process (MemoryStore, the default: one replica, nothing to run beside it) and
// Redis (many replicas). Decisions are asynchronous so the Redis store can answer over
// the network: `done` runs on the calling worker's thread, possibly before the call
// returns (the in-process store always answers at once, so a request never pauses on it).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/duration.h"
#include "limits/limiters.h"

namespace tahua {

// One counter a request is checked against: its name in the store (shared by every
// replica: the same name is the same counter), how it limits, and what the request costs.
struct LimitCheck {
  std::string_view key;  // valid until the call returns (the store copies what it keeps)
  LimitSpec spec;
  std::int64_t cost = 1;
  // Optional: a slot owned by the caller (one per counter, used by one thread) where a
  // store may keep where it found this counter, so the next decision skips the lookup.
  void** hint = nullptr;
};

// The answer for a whole request: every check allowed (and each was charged its cost)
// or one refused (and none was charged).
struct Admission {
  // The most a request can have: six limits in each of its tenant's, key's, tenant x
  // model's and model's sets and in four rate-limit policies.
  static constexpr std::size_t kMaxChecks = 48;
  bool allowed = true;
  std::size_t denied = kMaxChecks;  // the first refusing check
  std::size_t count = 0;
  std::int64_t at_ms = 0;  // the store's time of the decision (calibration refers to it)
  bool local = false;      // decided by this replica alone (the shared store was unreachable)
  std::array<LimitDecision, kMaxChecks> decisions{};
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // All or nothing over `checks` (at most Admission::kMaxChecks).
  virtual void admit(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) = 0;
  // The same decisions without charging anything (usage views): with cost 0, each
  // decision's `remaining` is what is left and `reset_ms` when it is full again.
  virtual void peek(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) = 0;
  // Calibration after the request: adds `delta` (negative: a refund) to a bucket or quota
  // the request was charged at `charged_ms` (Admission::at_ms), where it was charged
  // (`local`: Admission::local). Never dropped: a store that cannot apply it at once
  // keeps it (bounded; what exceeds the bound is counted and logged).
  virtual void adjust(const LimitCheck& check, std::int64_t charged_ms, std::int64_t delta, bool local) = 0;

  // For /metrics: whether the shared store answers, decisions made locally instead,
  // replicas seen alive, calibrations kept for later and dropped over the bound.
  struct Stats {
    bool shared = false;  // a store shared with other replicas (Redis)
    bool up = true;
    std::uint64_t local_decisions = 0;
    std::uint64_t replicas = 1;
    std::uint64_t adjustments_pending = 0;
    std::uint64_t adjustments_dropped = 0;
    std::uint64_t lease_admissions = 0;  // admitted from capacity leased earlier (no round trip)
    std::uint64_t lease_renewals = 0;    // leases renewed ahead of their end (no request waited)
    std::uint64_t lease_waits = 0;       // admissions that waited for a grant another request asked for
    std::uint64_t admissions_undone = 0;  // admissions whose answer was lost, undone in the store
    // getValue lookups: answered "missing" by the id filter, by its cache of misses, or
    // asked of the store; whether the filter is trusted now, and how many ids it holds.
    std::uint64_t lookups_filtered = 0;
    std::uint64_t lookups_cached = 0;
    std::uint64_t lookups_asked = 0;
    bool id_filter = false;  // a filter exists
    bool id_filter_ready = false;
    std::uint64_t id_filter_ids = 0;
  };
  virtual Stats stats() const { return {}; }
  // On a worker's thread, before it stops: what the worker holds for the store (summed
  // calibrations, leased capacity) is sent; `done` runs on that thread once the store
  // answered or its command timeout passed.
  virtual void flushWorker(std::function<void()> done) { done(); }

  // Durable records: JSON documents by namespace ("tenants", "keys") and id, written by
  // the admin API. Every replica keeps a mirror of them, so reading is local and
  // synchronous; a write completes through `done` (an error text, or none) on any
  // thread, once it is durable.
  struct Record {
    std::string id;
    std::string json;
    bool operator==(const Record&) const = default;
  };
  // The namespaces (each one hash in Redis, mirrored by every replica): the admin API's
  // tenants and keys, resources (ModelRoute, RateLimitPolicy, ... as "Kind/name") and
  // GPU node status reports (by node id) and registered endpoints ("model/id"), the last
  // two written only to a shared store; batches waiting to be metered (by batch id); MCP
  // tools' approved definitions ("server/tool", filters/mcp/).
  static constexpr std::string_view kNamespaces[] = {"tenants", "keys", "resources", "nodes", "endpoints", "batches", "mcp_tools"};
  using WriteDone = std::function<void(std::optional<std::string> error)>;
  virtual std::vector<Record> records(std::string_view ns) const = 0;
  virtual void putRecord(std::string_view ns, std::string_view id, std::string json, WriteDone done) = 0;
  virtual void eraseRecord(std::string_view ns, std::string_view id, WriteDone done) = 0;
  // `fn` runs (on any thread) after the mirror changed, by this replica or another.
  virtual void onRecordsChanged(std::function<void()> fn) = 0;
  // Moves on every change of the mirror (after the change is visible): a worker that
  // keeps what it derived from records checks it with one atomic load, no lock, and
  // derives again when it moved.
  std::uint64_t recordsGeneration() const { return records_generation_.load(std::memory_order_acquire); }

  // Append-only logs, bounded: the newest `keep` entries of a log are kept, older ones
  // dropped as new ones arrive (the admin API's audit log). A Redis stream in a shared
  // store (XADD MAXLEN, so every replica reads the same log); in memory otherwise (gone
  // with the process: logs are not journaled). Each entry gets an id from the store,
  // ordered by time of append; `done` runs on any thread.
  struct LogEntry {
    std::string id;
    std::string json;
  };
  struct LogPage {
    std::vector<LogEntry> entries;  // newest first
    std::optional<std::string> error;  // the store could not answer
  };
  static constexpr std::size_t kMaxLogRead = 1000;  // entries per readLog call, at most
  virtual void appendLog(std::string_view log, std::string json, std::size_t keep, WriteDone done) = 0;
  // Up to `count` (at most kMaxLogRead) entries older than the one with id `before`
  // (empty: the newest), newest first. An id that is not the store's reads nothing.
  virtual void readLog(std::string_view log, std::string_view before, std::size_t count, std::function<void(LogPage)> done) = 0;

  // Idempotency records: a completed answer kept under its key for a while, so a retry
  // gets it again instead of a second (billed) call. `done` runs on the calling worker's
  // thread with the record (status 0: there is none); a store that cannot answer falls
  // back to this replica's own records.
  struct Idempotent {
    std::string fingerprint;  // of the request that made it (a different request with the key is refused)
    int status = 0;
    std::string content_type;
    std::string body;
  };
  virtual void getIdempotent(std::string_view key, std::function<void(std::optional<Idempotent>)> done) = 0;
  virtual void putIdempotent(std::string_view key, Idempotent record, Millis ttl) = 0;

  // Values with a lifetime, read on demand rather than mirrored: plugins' key-value
  // store now; stored responses, files and sessions as they arrive. By a full key (the
  // caller's namespace in it: "tahua:kv:<plugin>:<key>"). Unlike the idempotency answers,
  // a store that cannot answer says so (Unavailable) instead of answering from this
  // replica alone: "not found" must mean not found. `done` runs on the calling worker's
  // thread. A value without a lifetime is not allowed: every value expires.
  struct ValueResult {
    enum class Status : std::uint8_t { Found, Missing, Unavailable } status = Status::Missing;
    std::string value;
  };
  static constexpr std::size_t kMaxValueBytes = 1 << 20;
  // Every value's key starts with this (a shared store's id filter scans for it).
  static constexpr std::string_view kValuePrefix = "tahua:kv:";
  virtual void getValue(std::string_view key, std::function<void(ValueResult)> done) = 0;
  // The same, for a key that may have been written a moment ago by another replica (an
  // id a client has just been given): "missing" comes from the store itself, never from
  // a replica's id filter or cache of misses, which hear of writes a moment later.
  virtual void getFreshValue(std::string_view key, std::function<void(ValueResult)> done) { getValue(key, std::move(done)); }
  virtual void putValue(std::string_view key, std::string value, Millis ttl, WriteDone done) = 0;
  virtual void eraseValue(std::string_view key, WriteDone done) = 0;
  // A value counted in a group (one tenant's stored responses) that holds at most
  // `max_bytes` (keys and values): writing one evicts the group's oldest values while
  // the group holds more. Its TTL applies as to any value; erase it with its group.
  struct ValueGroup {
    std::string_view name;  // a short, key-safe text (the caller hashes what it names)
    std::size_t max_bytes = 0;
  };
  virtual void putGroupedValue(std::string_view key, std::string value, Millis ttl, ValueGroup group, WriteDone done) = 0;
  virtual void eraseGroupedValue(std::string_view key, std::string_view group, WriteDone done) = 0;

  // Distributed locks (SET NX PX with an owner token; renewal and release check the
  // owner, so a lock that expired and was taken by another is never released by the
  // first). For one-replica-only work and for requests in flight under an idempotency
  // key. `done(true)` when this owner holds it now; on the calling worker's thread.
  virtual void tryLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) = 0;
  virtual void renewLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) = 0;
  virtual void unlock(std::string_view name, std::string_view owner) = 0;

 protected:
  void recordsChanged() { records_generation_.fetch_add(1, std::memory_order_release); }

 private:
  std::atomic<std::uint64_t> records_generation_{0};
};

// Wall-clock unix milliseconds (limits are shared with other replicas: not steady time).
std::int64_t unixMillis();

}  // namespace tahua
