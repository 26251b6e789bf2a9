// The in-process state store: one replica's counters and records in memory, shared by
// its workers. Counters are spread over 64 shards, each behind its own mutex held for
// the few arithmetic steps of a decision; an admission locks the shards of its checks
// in index order (no deadlock) and so is atomic over all of them.
//
// With a journal (store.journal), what cannot be rebuilt survives a restart: records
// are appended (and fsynced) as they are written, quota consumption is appended by a
// flush every `flush_interval` (see store/journal.h for the policy). Token buckets and
// request windows start afresh after a restart.
#pragma once

#include <condition_variable>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "config/config.h"
#include "store/journal.h"
#include "store/state_store.h"

namespace tahua {

class MemoryStore final : public StateStore {
 public:
  // `clock` returns unix milliseconds (tests pass a fake one).
  explicit MemoryStore(std::function<std::int64_t()> clock = unixMillis) : clock_(std::move(clock)) {}
  ~MemoryStore() override;

  // Reads `path` (creating it) and keeps it from now on; `error` says why not. Call
  // before the store is used.
  bool openJournal(const std::string& path, Millis flush_interval, std::vector<std::string>& warnings, std::string& error);
  // Writes quota consumption changed since the last flush (the flush thread calls it).
  void flush();

  void admit(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) override;
  void peek(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) override;
  void adjust(const LimitCheck& check, std::int64_t charged_ms, std::int64_t delta, bool local = true) override;

  std::vector<Record> records(std::string_view ns) const override;
  void putRecord(std::string_view ns, std::string_view id, std::string json, WriteDone done) override;
  void eraseRecord(std::string_view ns, std::string_view id, WriteDone done) override;
  void onRecordsChanged(std::function<void()> fn) override;
  void appendLog(std::string_view log, std::string json, std::size_t keep, WriteDone done) override;
  void readLog(std::string_view log, std::string_view before, std::size_t count, std::function<void(LogPage)> done) override;

  void getIdempotent(std::string_view key, std::function<void(std::optional<Idempotent>)> done) override;
  void putIdempotent(std::string_view key, Idempotent record, Millis ttl) override;
  void getValue(std::string_view key, std::function<void(ValueResult)> done) override;
  void putValue(std::string_view key, std::string value, Millis ttl, WriteDone done) override;
  void eraseValue(std::string_view key, WriteDone done) override;
  void putGroupedValue(std::string_view key, std::string value, Millis ttl, ValueGroup group, WriteDone done) override;
  void eraseGroupedValue(std::string_view key, std::string_view group, WriteDone done) override;
  void tryLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) override;
  void renewLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) override;
  void unlock(std::string_view name, std::string_view owner) override;

  // The decision `check` would get now, without charging it (admin views, tests).
  LimitDecision peek(const LimitCheck& check);
  std::size_t counters() const;

 private:
  static constexpr std::size_t kShards = 64;
  struct Counter {
    LimitState state;
    bool quota = false;  // journaled
    bool dirty = false;  // changed since the last flush
    std::size_t shard = 0;
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, Counter, StringHash, std::equal_to<>> counters;
  };
  // By the key's hash tag ("{t:team}"), as Redis Cluster picks a slot: one tenant's
  // counters share a shard, so a request's admission usually takes one lock.
  static std::size_t shardOf(std::string_view key) {
    const auto open = key.find('{');
    if (open != std::string_view::npos) {
      const auto close = key.find('}', open + 1);
      if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
    }
    return StringHash{}(key) % kShards;
  }
  Counter& counterOf(Shard& shard, std::string_view key, const LimitSpec& spec);
  // The check's shard, and its counter if the caller's hint knows it (counters are never
  // removed, so a pointer stays valid for the store's life).
  Counter* hinted(const LimitCheck& check) const { return check.hint ? static_cast<Counter*>(*check.hint) : nullptr; }
  void changed();

  std::function<std::int64_t()> clock_;
  std::array<Shard, kShards> shards_;

  mutable std::mutex records_mu_;  // records_, journal_, listeners_
  JournalState records_;           // records and, at load, the journaled quotas
  std::unique_ptr<Journal> journal_;
  std::vector<std::function<void()>> listeners_;

  // Idempotency records (journaled as records of namespace "idempotency") and locks.
  struct KeptAnswer {
    Idempotent record;
    std::int64_t expires_ms = 0;
  };
  struct Lock {
    std::string owner;
    std::int64_t expires_ms = 0;
  };
  std::mutex idem_mu_;
  std::unordered_map<std::string, KeptAnswer, StringHash, std::equal_to<>> answers_;
  std::unordered_map<std::string, Lock, StringHash, std::equal_to<>> locks_;
  std::size_t puts_since_sweep_ = 0;
  std::size_t answer_bytes_ = 0;  // bounded by kMaxAnswerBytes: the soonest to expire go first
  static constexpr std::size_t kMaxAnswerBytes = 256u << 20;
  void loadAnswers();  // from records_ at openJournal
  void expireAnswers(std::int64_t now);

  // Values (journaled as records of namespace "values", not fsynced: like the answers,
  // what a machine crash may lose is the last moments' writes).
  struct KeptValue {
    std::string value;
    std::int64_t expires_ms = 0;
    std::string group;       // empty: in no group
    std::uint64_t seq = 0;   // its entry in the group's order
  };
  // A group's values, oldest first. Entries of values dropped since (erased, expired,
  // written again) stay until they reach the front or the order is compacted.
  struct ValueGroupState {
    std::deque<std::pair<std::uint64_t, std::string>> order;
    std::size_t bytes = 0;
    std::size_t live = 0;
  };
  std::mutex values_mu_;
  std::unordered_map<std::string, KeptValue, StringHash, std::equal_to<>> values_;
  std::unordered_map<std::string, ValueGroupState, StringHash, std::equal_to<>> value_groups_;
  std::uint64_t value_seq_ = 0;
  void putValueIn(std::string_view key, std::string value, Millis ttl, ValueGroup group, WriteDone done);
  // Under values_mu_: counts a kept value in its group; evicts the group's oldest while it
  // holds more than max_bytes (their keys are appended to `evicted`).
  void groupValue(const std::string& key, KeptValue& kept, std::size_t max_bytes, std::vector<std::string>* evicted);
  std::size_t value_bytes_ = 0;  // bounded by kMaxValueStoreBytes: the soonest to expire go first
  std::size_t value_puts_since_sweep_ = 0;
  static constexpr std::size_t kMaxValueStoreBytes = 256u << 20;
  void loadValues();  // from records_ at openJournal
  void expireValues(std::int64_t now);
  void dropValue(decltype(values_)::iterator it);

  // Logs (appendLog), oldest first, each entry with its number (its id) in this store.
  std::mutex logs_mu_;
  std::map<std::string, std::deque<std::pair<std::uint64_t, std::string>>, std::less<>> logs_;
  std::uint64_t log_seq_ = 0;

  std::mutex flush_mu_;
  std::condition_variable flush_cv_;
  bool stopping_ = false;
  std::thread flusher_;
};

}  // namespace tahua
