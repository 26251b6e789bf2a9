// Shared by the Redis store's translation units (src/store/redis/*.cpp) only.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "limits/limiters.h"
#include "store/redis/redis_client.h"
#include "store/state_store.h"

namespace tahua::redis_detail {

constexpr std::size_t kMaxKeptAdjustments = 100'000;
constexpr std::string_view kRecordsPrefix = "tahua:records:";
constexpr const char* kChangesChannel = "tahua:changes";
constexpr const char* kValuesChannel = "tahua:values";  // a value's key, published when it is written
constexpr const char* kReplicasKey = "tahua:replicas";

// The connection of the worker whose thread this is (RedisStore::attach).
std::shared_ptr<RedisClient>& workerClient();

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
ArgScratch& argScratch();  // this thread's

// Calibrations of this worker, summed per counter and sent together every 20 ms (one
// script call for all of them, not one per request).
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct PendingAdjustment {
  LimitSpec spec;
  std::int64_t charged_ms = 0;
  std::int64_t delta = 0;
};
struct AdjustBatch {
  // counter (#period for quotas, #window for windows) -> sum
  std::unordered_map<std::string, PendingAdjustment, StringHash, std::equal_to<>> pending;
  std::string key;  // where the next key is built (no allocation once its capacity is there)
  // The sum found last for a counter name at a given address, and the times its period or
  // window covers: a request's calibrations (one per token or budget counter) skip
  // building the key, the period's calendar and the hash. A hit needs the same address,
  // length and text, and a time in the range; clearing `pending` forgets them all.
  struct Recent {
    const char* at = nullptr;
    std::size_t size = 0;
    std::int64_t from_ms = 0, to_ms = 0;
    const std::string* key = nullptr;  // the map's key: the counter's name, '#', its period
    PendingAdjustment* sum = nullptr;
  };
  std::array<Recent, 16> recent{};
  Recent& recentFor(std::string_view counter) {
    return recent[(reinterpret_cast<std::uintptr_t>(counter.data()) * 0x9E3779B97F4A7C15ull) >> 60];
  }
  std::unique_ptr<boost::asio::steady_timer> timer;
  bool armed = false;
};
std::unique_ptr<AdjustBatch>& adjustBatch();  // this worker's (null elsewhere)
constexpr Millis kAdjustEvery{20};
constexpr std::size_t kAdjustPerCommand = 200;

// Leases: capacity a worker took from a shared counter beyond a request's cost (the
// admission script's `want`), so later requests are admitted from it without a round
// trip. What Redis granted was charged there, so a lease never lets a limit be
// exceeded; what a worker holds unused is only unavailable to the others until it is
// used or returned (docs/tenants-and-limits.md bounds it).
struct Lease {
  LimitSpec spec;
  std::int64_t left = 0;        // charged in Redis, not yet given to a request
  std::int64_t granted_ms = 0;  // the server's time of the last grant (refunds refer to it)
  std::chrono::steady_clock::time_point granted_at{}, expires{};
  std::int64_t remaining = 0;   // what Redis said was left after the grant
  std::int64_t reset_ms = 0;
  std::int64_t granted = 0;     // the size of the last grant (renewed when a quarter is left)
  bool renewing = false;        // a grant is on its way: others ask for no more meanwhile
  bool extendable = false;      // a renewal would outlive `expires` (not the end of a window or period)
};
struct Leases {
  std::unordered_map<std::string, Lease, StringHash, std::equal_to<>> map;
  // The lease found last for a key at a given address (a limit plan's key strings stay
  // where they are while the plan lives): an admission's lookups skip the key's hash
  // (~110 instructions each, five a request in the production profile). A hit needs
  // the same address and the same text, so a buffer reused for another key misses;
  // erasing a lease forgets them all (the map's nodes otherwise stay where they are).
  struct Recent {
    const char* at = nullptr;
    const std::string* key = nullptr;
    Lease* lease = nullptr;
  };
  std::array<Recent, 64> recent{};
  Lease* find(std::string_view key) {
    // The address's bits mixed (Fibonacci hashing): heap strings sit 16 bytes aligned and
    // a plan's keys close together, so its low bits alone put two of a request's keys in
    // one slot, where they pushed each other out on every request.
    static_assert(std::tuple_size_v<decltype(recent)> == 64);
    Recent& r = recent[(reinterpret_cast<std::uintptr_t>(key.data()) * 0x9E3779B97F4A7C15ull) >> 58];
    if (r.at == key.data() && r.key && r.key->size() == key.size() && std::memcmp(r.key->data(), key.data(), key.size()) == 0)
      return r.lease;
    auto it = map.find(key);
    if (it == map.end()) return nullptr;
    r = Recent{key.data(), &it->first, &it->second};
    return &it->second;
  }
  void forgetRecent() { recent.fill(Recent{}); }
  std::unique_ptr<boost::asio::steady_timer> sweep;  // returns expired leases' units
  bool armed = false;
  // Renewals sent and not answered yet. A stopping worker returns its leases only after
  // they are answered (what they bring would be charged and never returned), and sends
  // no new ones (`closed`).
  std::size_t renewals_in_flight = 0;
  bool closed = false;
  std::function<void()> after_renewals;
  // Admissions waiting for a grant on its way (one call asks, the others wait): a burst
  // that finds no lease — after an idle second, or as a window begins — would otherwise
  // send a script call each, and Redis runs them one after the other (64 of them took
  // the last ~10 ms on a busy core). Each waits for one answer at most: when it comes
  // they are admitted from the grant in order, and those it cannot take ask Redis.
  struct Waiter {
    std::vector<LimitCheck> checks;  // keys are views of names that outlive the request
    std::function<void(const Admission&)> done;
  };
  std::vector<Waiter> waiting;
};
constexpr std::size_t kMaxWaiting = 4096;  // beyond this a request asks Redis itself
std::unique_ptr<Leases>& workerLeases();  // this worker's (null elsewhere)
constexpr Millis kLeaseFor{1'000};       // a lease older than this is returned
constexpr Millis kRenewAhead{250};       // a lease in use is renewed this long before it ends
constexpr std::int64_t kLeaseParts = 64;  // a lease is at most limit / (64 x replicas x workers) ...
constexpr std::int64_t kMinLease = 16;    // ... and none when that is below 16 units

// A reply that means "this server cannot serve us now" (a replica after a failover, a
// server loading its data): the connection is closed so the next command reconnects,
// with Sentinel to the current master.
inline bool unusableServer(const std::optional<RedisReply>& r) {
  if (!r || !r->isError()) return false;
  for (const char* prefix : {"READONLY", "LOADING", "MASTERDOWN", "NOSCRIPT"})
    if (r->str.rfind(prefix, 0) == 0) return true;
  return false;
}


std::vector<std::string> checkArgs(const LimitCheck& c);

}  // namespace tahua::redis_detail
