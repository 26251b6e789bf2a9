#include "discovery/dns_discovery.h"

#include <algorithm>
#include <cmath>

#include "core/log.h"
#include "discovery/dns_resolver.h"
#include "core/thread_name.h"

namespace tahua {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRampTick = std::chrono::seconds(1);  // a slow start's weight is republished this often

DnsResolver::Type resolverType(DnsDiscoveryConfig::Type t) {
  switch (t) {
    case DnsDiscoveryConfig::Type::AAAA: return DnsResolver::Type::AAAA;
    case DnsDiscoveryConfig::Type::SRV: return DnsResolver::Type::SRV;
    default: return DnsResolver::Type::A;
  }
}

bool sameDns(const DnsDiscoveryConfig& a, const DnsDiscoveryConfig& b) {
  return a.name == b.name && a.type == b.type && a.port == b.port && a.min_ttl == b.min_ttl && a.max_ttl == b.max_ttl &&
         a.slow_start == b.slow_start && a.keep_on_empty == b.keep_on_empty;
}

// The slow start factor: 10 % at first, all of the weight once `slow_start` has passed.
double ramp(const DiscoveredEndpoint& e, Millis slow_start, Clock::time_point now) {
  if (slow_start.count() <= 0) return 1;
  const double age = std::chrono::duration<double, std::milli>(now - e.since).count();
  return std::clamp(0.1 + 0.9 * age / static_cast<double>(slow_start.count()), 0.1, 1.0);
}

}  // namespace

std::string DiscoveredEndpoint::address() const {
  const std::string p = std::to_string(port);
  return ip.find(':') != std::string::npos ? "[" + ip + "]:" + p : ip + ":" + p;
}

DnsDiscovery::DnsDiscovery(std::function<void()> changed) : changed_(std::move(changed)) {}

DnsDiscovery::~DnsDiscovery() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DnsDiscovery::configure(const Config& config) {
  std::vector<Target> next;
  for (const auto& m : config.models)
    for (const auto& d : m.deployments)
      if (d.dns && d.source == "config") next.push_back(Target{m.name + "/" + d.id, *d.dns, {}, false});
  bool start = false;
  {
    std::lock_guard lock(mu_);
    for (auto& t : next)
      for (const auto& old : targets_)
        if (old.key == t.key && sameDns(old.dns, t.dns)) {
          t.due = old.due;
          t.failing = old.failing;
        }
    // Endpoints of deployments that are gone (or changed) are forgotten.
    auto table = std::make_shared<EndpointTable>();
    for (const auto& t : next)
      if (auto it = table_->find(t.key); it != table_->end()) {
        bool same = false;
        for (const auto& old : targets_) same = same || (old.key == t.key && sameDns(old.dns, t.dns));
        if (same) table->emplace(it->first, it->second);
      }
    table_ = std::move(table);
    if (where_.resolvers != config.discovery.resolvers || where_.timeout != config.discovery.timeout) reconfigured_ = true;
    where_ = config.discovery;
    targets_ = std::move(next);
    start = !targets_.empty() && !thread_.joinable();
  }
  if (start)
    thread_ = std::thread([this] {
      nameThisThread("tahua-dns");
      run();
    });
  cv_.notify_all();
}

EndpointTablePtr DnsDiscovery::endpoints() const {
  std::lock_guard lock(mu_);
  return table_;
}

DnsDiscovery::Stats DnsDiscovery::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void DnsDiscovery::run() {
  std::unique_ptr<DnsResolver> resolver;
  Clock::time_point ramp_until{}, ramped_at{};  // slow starts: until when, and the last republish
  std::unique_lock lock(mu_);
  while (!stop_) {
    // A slow start in progress: its weights are republished once a second, and once more
    // when it is over (the full weight).
    if (ramped_at < ramp_until && Clock::now() >= ramped_at + kRampTick) {
      ramped_at = Clock::now();
      lock.unlock();
      changed_();
      lock.lock();
      continue;
    }
    if (!resolver || reconfigured_) {
      reconfigured_ = false;
      const DiscoveryConfig where = where_;
      lock.unlock();
      std::string error;
      resolver = std::make_unique<DnsResolver>(where.resolvers, where.timeout, error);
      if (!error.empty()) log::error("dns discovery", {{"error", error}});
      lock.lock();
      continue;
    }
    const auto now = Clock::now();
    auto due = std::find_if(targets_.begin(), targets_.end(), [&](const Target& t) { return t.due <= now; });
    if (due == targets_.end()) {
      auto wake = now + std::chrono::hours(1);
      for (const auto& t : targets_) wake = std::min(wake, t.due);
      if (ramped_at < ramp_until) wake = std::min(wake, ramped_at + kRampTick);
      cv_.wait_until(lock, wake, [&] { return stop_ || reconfigured_; });
      continue;
    }
    const Target target = *due;
    lock.unlock();
    const DnsAnswer answer = resolver->resolve(target.dns.name, resolverType(target.dns.type), target.dns.port);
    lock.lock();
    auto it = std::find_if(targets_.begin(), targets_.end(), [&](const Target& t) { return t.key == target.key; });
    if (it == targets_.end() || !sameDns(it->dns, target.dns)) continue;  // reconfigured meanwhile
    ++stats_.resolutions;
    const auto at = Clock::now();
    const auto known = table_->find(target.key);
    std::vector<DiscoveredEndpoint> endpoints;
    bool keep = false;
    if (answer.status == DnsAnswer::Status::Ok) {
      for (const DnsRecord& r : answer.records) {
        DiscoveredEndpoint e{r.ip, r.port, r.weight, at};
        if (known != table_->end())
          for (const auto& old : known->second)
            if (old.ip == e.ip && old.port == e.port) e.since = old.since;
        endpoints.push_back(std::move(e));
      }
      std::sort(endpoints.begin(), endpoints.end(), [](const DiscoveredEndpoint& a, const DiscoveredEndpoint& b) { return a.address() < b.address(); });
      endpoints.erase(std::unique(endpoints.begin(), endpoints.end(), [](const DiscoveredEndpoint& a, const DiscoveredEndpoint& b) { return a.ip == b.ip && a.port == b.port; }),
                      endpoints.end());
      const auto ttl = std::clamp<Millis>(std::chrono::duration_cast<Millis>(answer.ttl), target.dns.min_ttl, target.dns.max_ttl);
      it->due = at + ttl;
    } else {
      it->due = at + target.dns.min_ttl;
      keep = answer.status == DnsAnswer::Status::Failed || target.dns.keep_on_empty;
    }
    if (answer.status == DnsAnswer::Status::Failed) {
      ++stats_.failures;
      if (!it->failing)
        log::warn("dns discovery: resolution failed; keeping the last endpoints",
                  {{"deployment", target.key}, {"name", target.dns.name}, {"error", answer.error}});
      it->failing = true;
    } else {
      if (it->failing) log::info("dns discovery: resolving again", {{"deployment", target.key}, {"name", target.dns.name}});
      it->failing = false;
      if (answer.status == DnsAnswer::Status::Empty && keep)
        log::warn("dns discovery: no records; keeping the last endpoints", {{"deployment", target.key}, {"name", target.dns.name}});
    }
    if (keep) continue;
    bool changed = known == table_->end() || known->second.size() != endpoints.size();
    for (std::size_t i = 0; !changed && i < endpoints.size(); ++i)
      changed = known->second[i].address() != endpoints[i].address() || known->second[i].weight != endpoints[i].weight;
    if (!changed) continue;
    auto table = std::make_shared<EndpointTable>(*table_);
    (*table)[target.key] = endpoints;
    table_ = std::move(table);
    for (const auto& e : endpoints)
      if (target.dns.slow_start.count() > 0) ramp_until = std::max(ramp_until, e.since + target.dns.slow_start);
    ramped_at = Clock::now();  // this change publishes the weights too
    log::info("dns discovery: endpoints changed", {{"deployment", target.key}, {"name", target.dns.name}, {"endpoints", endpoints.size()}});
    lock.unlock();
    changed_();
    lock.lock();
  }
}

void expandEndpoints(Config& config, const EndpointTable& table, Clock::time_point now) {
  bool any = false;
  for (auto& m : config.models) {
    if (std::none_of(m.deployments.begin(), m.deployments.end(), [](const DeploymentConfig& d) { return d.dns && d.source == "config"; }))
      continue;
    std::vector<DeploymentConfig> out;
    for (const auto& d : m.deployments) {
      const auto it = d.dns && d.source == "config" ? table.find(m.name + "/" + d.id) : table.end();
      if (it == table.end()) {
        out.push_back(d);  // not resolved yet (or not from DNS): as configured
        continue;
      }
      for (const DiscoveredEndpoint& e : it->second) {
        DeploymentConfig x = d;
        x.address = e.address();
        x.id = d.id + "@" + x.address;
        x.node = x.address;  // an agent beside the server reports under its own address
        x.source = "dns";
        const double factor = ramp(e, d.dns->slow_start, now);
        x.ramp = static_cast<float>(factor);
        const double w = static_cast<double>(d.weight) * e.weight * factor;
        x.weight = d.weight == 0 ? 0 : static_cast<std::uint32_t>(std::clamp(std::lround(w), 1L, 1'000'000'000L));
        out.push_back(std::move(x));
      }
    }
    // A model keeps a deployment (a DNS one cleared by `on_empty: clear` and nothing
    // else left): the configured one, so requests get the base_url host's answer.
    if (out.empty())
      for (const auto& d : m.deployments) out.push_back(d);
    m.deployments = std::move(out);
    markCanaryDeployments(m);
    any = true;
  }
  if (!any) return;
  numberDeployments(config);
}

bool slowStarting(const Config& config, const EndpointTable& table, Clock::time_point now) {
  for (const auto& m : config.models)
    for (const auto& d : m.deployments)
      if (d.dns && d.source == "config" && d.dns->slow_start.count() > 0)
        if (auto it = table.find(m.name + "/" + d.id); it != table.end())
          for (const auto& e : it->second)
            if (ramp(e, d.dns->slow_start, now) < 1) return true;
  return false;
}

}  // namespace tahua
