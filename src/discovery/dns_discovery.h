// Upstream discovery from DNS: every deployment with `dns` (config.h) has its name
// resolved on a thread of its own (never a worker's), again when the records' TTL has
// passed (bounded by min_ttl and max_ttl). Each address is an endpoint; the gateway
// turns a deployment into one deployment per endpoint when it publishes a config
// (expandEndpoints), so each has its own connection pool, in-flight count, latency,
// breaker, ejection and node status, and in-flight requests on an endpoint that
// disappears finish on the snapshot they started with.
//
// A failed resolution keeps the last endpoints (logged once per change of state and
// counted); an empty answer keeps them too unless the deployment says `on_empty: clear`.
// Until the first answer, a deployment is used as configured (its base_url's host).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"

namespace tahua {

struct DiscoveredEndpoint {
  std::string ip;
  std::uint16_t port = 0;
  std::uint32_t weight = 1;  // SRV's
  std::chrono::steady_clock::time_point since;  // first seen (slow start counts from it)
  std::string address() const;  // ip:port, [ip]:port for IPv6
};

// "model/deployment id" -> its endpoints now (absent: not resolved yet).
using EndpointTable = std::map<std::string, std::vector<DiscoveredEndpoint>, std::less<>>;
using EndpointTablePtr = std::shared_ptr<const EndpointTable>;

class DnsDiscovery {
 public:
  // `changed` runs on the discovery thread when an endpoint set changed (or a slow
  // start is ramping: about once a second until it ends).
  explicit DnsDiscovery(std::function<void()> changed);
  ~DnsDiscovery();

  // The deployments to resolve and where to ask, from the config just loaded. The
  // first call starts the thread (none if no deployment uses DNS).
  void configure(const Config& config);
  EndpointTablePtr endpoints() const;

  struct Stats {
    std::uint64_t resolutions = 0, failures = 0;
  };
  Stats stats() const;

 private:
  struct Target {
    std::string key;  // model/id
    DnsDiscoveryConfig dns;
    std::chrono::steady_clock::time_point due{};
    bool failing = false;
  };
  void run();

  std::function<void()> changed_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Target> targets_;
  DiscoveryConfig where_;
  bool reconfigured_ = false;
  bool stop_ = false;
  EndpointTablePtr table_ = std::make_shared<EndpointTable>();
  Stats stats_;
  std::thread thread_;
};

// The config with each DNS deployment replaced by one deployment per endpoint (id
// "<id>@<address>", `address` set, `source` "dns", `node` the address, weight times the
// SRV weight and the slow start factor); deployments indexes and pick tables rebuilt.
// A deployment not resolved yet stays as configured.
void expandEndpoints(Config& config, const EndpointTable& table, std::chrono::steady_clock::time_point now);
// Whether some endpoint of `config`'s DNS deployments is still in its slow start.
bool slowStarting(const Config& config, const EndpointTable& table, std::chrono::steady_clock::time_point now);

}  // namespace tahua
