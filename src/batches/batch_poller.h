// Meters batches when they end. A batch runs at the provider, past the gateway: its
// usage is only known from its output file. Every batch created through the gateway is
// registered in the state store (namespace "batches", mirrored by every replica); one
// replica at a time (the lock's holder) asks the provider about each, every
// files.poll_interval, and once a batch has ended reads its output file, sums its usage
// per model and meters it: a usage record per model (api "openai-batch", priced at the
// model's batch prices when it has them), the token and cost metrics, the access log.
// Then the registration goes. A provider that does not answer is asked again next time;
// a registration older than files.ttl is dropped with a warning. The calls are
// authorized as the gateway's requests to the provider are: its key, or the current
// access token of its cloud credential (Entra ID), read from the token cache entry its
// adapter holds. A provider without a usable token now (or whose key's variable is
// unset) is not called without credentials: its batches wait for the next turn, said
// once in a warning until it has one again.
//
// No Asio here: the worker's services make the calls and the timers (it runs on the
// first worker's loop).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "config/config.h"
#include "core/usage.h"
#include "providers/snapshot.h"

namespace tahua {

class StateStore;
class WorkerServices;
class TimerHandle;
struct OutboundResponse;

// One model's usage in one ended batch.
struct BatchUsage {
  std::string batch_id;
  std::string owner;     // the tenant (or "key:<name>") that created it
  std::string key;       // the key that created it
  std::string provider;
  std::string model;     // the gateway's model name ("" when no model maps to it)
  Usage usage;           // with `batch` set: priced at the batch prices
  std::int64_t requests = 0;  // lines of the output file for this model
};

class BatchPollerHost {
 public:
  // The config and the providers' adapters (their token cache entries) of now.
  virtual SnapshotPtr currentSnapshot() const = 0;
  // Meters it: the chain's completion phase for a request made of it (usage record,
  // metrics, access log). On the poller's worker thread.
  virtual void meterBatch(const BatchUsage& usage) = 0;

 protected:
  ~BatchPollerHost() = default;
};

class BatchPoller {
 public:
  BatchPoller(StateStore& store, WorkerServices& services, BatchPollerHost& host);
  ~BatchPoller();
  // Polls every files.poll_interval (of the config at each turn), from now on.
  void start();
  void stop();

  // An output file's lines ({"response": {"body": {"model", "usage"}}}): usage per
  // model as the provider named it. Pure; unit-tested.
  static std::map<std::string, BatchUsage> outputUsage(std::string_view jsonl);

 private:
  void schedule();
  void tick();
  void pollNext();
  // A batch that ended: its output file read and metered (provider: the turn's config's index).
  void ended(const std::string& id, const std::string& record, std::size_t provider_index, std::string_view output_file);
  // The bearer token provider `provider_index` is called with (empty: its key, or none
  // needed), or nullopt when it cannot be called now (no usable token; an unset key).
  std::optional<std::string> credentials(std::size_t provider_index);

  StateStore& store_;
  WorkerServices& services_;
  BatchPollerHost& host_;
  std::unique_ptr<TimerHandle> timer_;
  std::string owner_;                 // this replica's lock owner token
  std::vector<std::pair<std::string, std::string>> queue_;  // registrations left this turn
  SnapshotPtr snapshot_;              // the turn's: its config and adapters
  ConfigPtr config_;                  // snapshot_->config
  std::set<std::string> uncalled_;    // providers skipped for want of credentials (warned once)
  bool running_ = false;
  bool stopped_ = false;
};

}  // namespace tahua
