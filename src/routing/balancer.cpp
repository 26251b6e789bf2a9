#include "routing/balancer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include <boost/container_hash/hash.hpp>

namespace tahua {

std::string_view nodeStateName(NodeState s) {
  switch (s) {
    case NodeState::Healthy: return "HEALTHY";
    case NodeState::Degraded: return "DEGRADED";
    case NodeState::Overloaded: return "OVERLOADED";
    case NodeState::Unhealthy: return "UNHEALTHY";
  }
  return "UNHEALTHY";
}

std::optional<NodeState> parseNodeState(std::string_view s) {
  if (s == "HEALTHY") return NodeState::Healthy;
  if (s == "DEGRADED") return NodeState::Degraded;
  if (s == "OVERLOADED") return NodeState::Overloaded;
  if (s == "UNHEALTHY") return NodeState::Unhealthy;
  return std::nullopt;
}

double loadScore(const NodeStatus& s, const GpuScoreConfig& c) {
  if (s.state == NodeState::Unhealthy || s.state == NodeState::Overloaded) return std::numeric_limits<double>::infinity();
  double score = s.gpu_util * c.gpu_util + s.gpu_memory * c.gpu_memory +
                 s.active_connections / c.connections_scale * c.connections + s.queued_requests / c.queue_scale * c.queue;
  if (s.state == NodeState::Degraded) score *= c.degraded_factor;
  return score;
}

const NodeStatus* liveStatus(const NodeTable* nodes, std::string_view node, const GpuScoreConfig& c,
                             SteadyClock::time_point now) {
  if (!nodes) return nullptr;
  auto it = nodes->find(node);
  if (it == nodes->end() || now - it->second.reported > c.status_ttl) return nullptr;
  return &it->second;
}

std::uint64_t stickyHash(std::string_view key) { return boost::hash_range(key.begin(), key.end()); }

std::pair<std::string_view, std::string_view> chooseVersion(const ModelConfig& model, std::string_view pin,
                                                            std::string_view sticky_key, std::mt19937_64& rng) {
  if (!pin.empty()) return {pin, "pin"};
  const CanaryConfig& c = model.canary;
  if (!c.enabled) return {{}, "none"};
  if (!sticky_key.empty()) {
    if (std::find(c.allow.begin(), c.allow.end(), sticky_key) != c.allow.end()) return {c.version, "allow"};
    // Basis points, so fractional percentages (0.5%) work.
    const bool canary = static_cast<double>(stickyHash(sticky_key) % 10000) < c.percent * 100;
    return {canary ? std::string_view(c.version) : std::string_view{}, "sticky"};
  }
  const bool canary = static_cast<double>(rng() % 10000) < c.percent * 100;
  return {canary ? std::string_view(c.version) : std::string_view{}, "percent"};
}

namespace {

double uniform(std::mt19937_64& rng) { return std::generate_canonical<double, 53>(rng); }

// splitmix64's finaliser: a cheap, well-mixed 64-bit hash.
std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::size_t weightedRandom(std::span<const std::size_t> idx, std::span<const double> weights, std::mt19937_64& rng) {
  double total = 0;
  for (double w : weights) total += w;
  if (!(total > 0)) return idx[rng() % idx.size()];
  double r = uniform(rng) * total;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    r -= weights[i];
    if (r < 0) return idx[i];
  }
  return idx.back();
}

}  // namespace

// The better of two candidates under least_outstanding / latency; ties at random.
std::size_t Balancer::cheaper(const ModelConfig& model, const PickRequest& req, std::size_t a, std::size_t b) {
  const auto cost = [&](std::size_t i) {
    const DeploymentState& s = *req.states[i];
    // A slow-starting endpoint (ramp < 1) counts as busier than it is: at 10 % it wins
    // only against deployments with ten times its load.
    const double share = s.throttle * model.deployments[i].ramp;
    if (model.balancing == BalancePolicy::LeastOutstanding) return static_cast<double>(s.outstanding + 1) / share;
    // Peak-EWMA: latency times load, penalising recent failures. A deployment not
    // measured yet costs nothing, so it gets tried.
    const double latency = s.has_latency ? s.ewma_ms : 0.0;
    return (latency + 1.0) * (s.outstanding + 1) * (s.consecutive_failures + 1) / share;
  };
  const double ca = cost(a), cb = cost(b);
  return ca < cb ? a : (cb < ca ? b : (rng_() & 1 ? a : b));
}

PickResult Balancer::pick(const PickRequest& req) {
  const ModelConfig& model = *req.model;
  const auto& ds = model.deployments;
  PickResult result;
  if (ds.size() == 1) {
    result.reason = "single";
    return result;
  }
  auto [version, reason] = chooseVersion(model, req.pin_version, req.sticky_key, rng_);
  result.reason = reason;

  // The canary flag is precomputed at load: only a pin to another version compares strings.
  const bool to_canary = !version.empty() && model.canary.enabled && version == model.canary.version;

  // Fast path, O(log n): draw from the version's precomputed table as if every
  // deployment were healthy and accept the draw only if it is (a throttled one with
  // probability = its throttle factor). A rejected draw falls through to the exact scan
  // below. That is rejection sampling: the result has exactly the distribution of the
  // scan (P(i) = w_i t_i / sum w t), while a healthy group never pays for walking all of
  // its deployments.
  if (const PickTable* table = version.empty() ? &model.stable_table : (to_canary ? &model.canary_table : nullptr);
      table && !table->index.empty()) {
    const auto healthy = [&](std::size_t i) {
      const DeploymentState& st = *req.states[i];
      return st.ejected_until <= req.now && st.throttled_until <= req.now &&
             (st.breaker.state != Breaker::State::Open || st.breaker.open_until <= req.now) &&
             std::find(req.exclude.begin(), req.exclude.end(), ds[i].index) == req.exclude.end();
    };
    if (model.balancing == BalancePolicy::WeightedRandom) {
      const std::uint64_t r = rng_() % table->cumulative.back();
      const auto k = static_cast<std::size_t>(std::upper_bound(table->cumulative.begin(), table->cumulative.end(), r) -
                                              table->cumulative.begin());
      const std::size_t i = table->index[k];
      const double t = req.states[i]->throttle;
      if (healthy(i) && (t >= 1 || uniform(rng_) < t)) {
        result.index = i;
        return result;
      }
    } else if ((model.balancing == BalancePolicy::LeastOutstanding || model.balancing == BalancePolicy::Latency) &&
               table->index.size() >= 2) {
      // Two distinct uniform candidates; if both are healthy this is the scan's pair.
      const std::size_t n = table->index.size();
      const std::size_t ka = rng_() % n;
      std::size_t kb = rng_() % (n - 1);
      if (kb == ka) kb = n - 1;
      const std::size_t a = table->index[ka], b = table->index[kb];
      if (healthy(a) && healthy(b)) {
        result.index = cheaper(model, req, a, b);
        return result;
      }
    }
  }

  // Scratch space reused per worker thread: no allocation per decision.
  thread_local std::vector<std::size_t> subset, usable, weighted;
  thread_local std::vector<double> weights;
  const auto inStable = [&](const DeploymentConfig& d) { return !model.canary.enabled || !d.canary; };
  const auto inChosen = [&](const DeploymentConfig& d) {
    if (version.empty()) return inStable(d);
    return to_canary ? d.canary : d.version == version;
  };
  // One pass sorts the version's deployments into: all of them (subset), those not
  // ejected or throttled (usable), and of those the ones with weight (weighted). Each
  // narrower list is used when it is not empty: ejected deployments get traffic only
  // when that is all there is, weight-0 ones only when nothing else is left.
  const auto classify = [&](auto&& member) {
    subset.clear();
    usable.clear();
    weighted.clear();
    for (std::size_t i = 0; i < ds.size(); ++i) {
      if (!member(ds[i])) continue;
      subset.push_back(i);
      const DeploymentState& st = *req.states[i];
      if (st.ejected_until > req.now || st.throttled_until > req.now) continue;
      if (st.breaker.state == Breaker::State::Open && st.breaker.open_until > req.now) continue;  // its breaker is open
      if (!req.exclude.empty() && std::find(req.exclude.begin(), req.exclude.end(), ds[i].index) != req.exclude.end()) continue;
      usable.push_back(i);
      if (ds[i].weight > 0) weighted.push_back(i);
    }
  };
  classify(inChosen);
  if (subset.empty()) {
    // An empty subset (a pin to a version nobody runs, a canary with no deployments)
    // falls back to stable, and to everything if there is no stable either.
    result.fallback_to_stable = true;
    classify(inStable);
    if (subset.empty()) classify([](const DeploymentConfig&) { return true; });
  }
  if (usable.empty()) {
    // Every deployment of the chosen version is ejected or throttled: any usable one of
    // the model serves better (an ejected canary sends its users to stable). Only when
    // all are out do the ejected ones get traffic.
    thread_local std::vector<std::size_t> chosen;
    chosen = subset;
    classify(inStable);
    if (usable.empty()) classify([](const DeploymentConfig&) { return true; });
    if (!usable.empty()) {
      result.fallback_to_stable = true;
    } else {
      subset = chosen;
      usable = chosen;
      weighted.clear();
      for (std::size_t i : usable)
        if (ds[i].weight > 0) weighted.push_back(i);
    }
  }
  if (weighted.empty()) weighted = usable;
  std::span<const std::size_t> cand(weighted);
  if (cand.size() == 1) {
    result.index = cand[0];
    return result;
  }

  switch (model.balancing) {
    case BalancePolicy::WeightedRandom: {
      weights.clear();
      for (std::size_t i : cand) weights.push_back(static_cast<double>(ds[i].weight) * req.states[i]->throttle);
      result.index = weightedRandom(cand, weights, rng_);
      break;
    }
    case BalancePolicy::RoundRobin: {
      // Smooth weighted round robin (nginx's): spreads a 5:1:1 split as a,a,b,a,c,a,a
      // rather than a,a,a,a,a,b,c.
      std::int64_t total = 0;
      std::size_t best = cand[0];
      for (std::size_t i : cand) {
        const auto w = static_cast<std::int64_t>(std::max(1.0, ds[i].weight * req.states[i]->throttle));
        req.states[i]->rr_current += w;
        total += w;
        if (req.states[i]->rr_current > req.states[best]->rr_current) best = i;
      }
      req.states[best]->rr_current -= total;
      result.index = best;
      break;
    }
    case BalancePolicy::LeastOutstanding:
    case BalancePolicy::Latency: {
      // Power of two choices: two distinct random candidates, the cheaper wins. Avoids
      // the herd that "always the least loaded" causes when every worker decides alone.
      const std::size_t a = cand[rng_() % cand.size()];
      std::size_t b = cand[rng_() % (cand.size() - 1)];
      if (b == a) b = cand.back();
      result.index = cheaper(model, req, a, b);
      break;
    }
    case BalancePolicy::GpuAware: {
      // Score the reported nodes; drop UNHEALTHY / OVERLOADED / over eject_score unless
      // all are; then weighted random over the best `top` by the model's split (the
      // seed's 60/30/10 unless configured), never everything to the single best.
      // Equal scores rank in a random order (the middle key): every node that has not
      // reported, or whose report expired, scores 0, and ranking those in config order
      // would send 60/30/10% to the first three and nothing to the others.
      thread_local std::vector<std::tuple<double, std::uint64_t, std::size_t>> scored;
      scored.clear();
      const std::uint64_t salt = rng_();
      for (std::size_t i : cand) {
        const NodeStatus* st = nullptr;
        if (!req.node_status.empty()) {
          st = req.node_status[i];  // resolved once per table by the caller
          if (st && req.now - st->reported > model.gpu.status_ttl) st = nullptr;
        } else {
          st = liveStatus(req.nodes, ds[i].node, model.gpu, req.now);
        }
        scored.emplace_back(st ? loadScore(*st, model.gpu) : 0.0, mix64(salt + i * 0x9e3779b97f4a7c15ULL), i);  // unreported: an idle node
      }
      const auto healthy = std::count_if(scored.begin(), scored.end(),
                                         [&](const auto& p) { return std::get<0>(p) <= model.gpu.eject_score; });
      if (healthy > 0)
        scored.erase(std::remove_if(scored.begin(), scored.end(), [&](const auto& p) { return !(std::get<0>(p) <= model.gpu.eject_score); }),
                     scored.end());
      const std::size_t top = std::min({static_cast<std::size_t>(model.gpu.top), model.gpu.split.size(), scored.size()});
      std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(top), scored.end());
      weights.clear();
      thread_local std::vector<std::size_t> best;
      best.clear();
      for (std::size_t k = 0; k < top; ++k) {
        best.push_back(std::get<2>(scored[k]));
        weights.push_back(model.gpu.split[k]);
      }
      result.index = weightedRandom(best, weights, rng_);
      break;
    }
  }
  return result;
}

void recordLatency(DeploymentState& s, double ttfb_ms, SteadyClock::time_point now) {
  ++s.ttft_buckets[static_cast<std::size_t>(
      std::lower_bound(kTtftBoundsMs.begin(), kTtftBoundsMs.end(), ttfb_ms) - kTtftBoundsMs.begin())];
  constexpr double kTauMs = 10'000;  // the estimate forgets over ~10 s
  if (!s.has_latency) {
    s.ewma_ms = ttfb_ms;
    s.has_latency = true;
  } else if (ttfb_ms > s.ewma_ms) {
    s.ewma_ms = ttfb_ms;  // peak: jump up at once, decay slowly
  } else {
    const double dt = std::chrono::duration<double, std::milli>(now - s.ewma_at).count();
    const double decay = std::exp(-std::max(dt, 0.0) / kTauMs);
    s.ewma_ms = s.ewma_ms * decay + ttfb_ms * (1 - decay);
  }
  s.ewma_at = now;
}

void recordOutcome(DeploymentState& s, const OutlierConfig& c, bool failure, SteadyClock::time_point now) {
  ++s.requests;
  // Error-rate window: counts restart when the interval has passed (a tumbling window:
  // cheap, and good enough to notice "20% failing for a minute").
  if (c.error_rate > 0) {
    if (now - s.window_start >= c.interval) {
      s.window_start = now;
      s.window_requests = 0;
      s.window_failures = 0;
    }
    ++s.window_requests;
    if (failure) ++s.window_failures;
  }
  if (!failure) {
    s.consecutive_failures = 0;
    if (s.ejected_until <= now) s.ejections = 0;  // healthy again after its ejection
    return;
  }
  ++s.failures;
  ++s.consecutive_failures;
  const bool by_streak =
      c.consecutive_failures > 0 && s.consecutive_failures >= static_cast<std::uint32_t>(c.consecutive_failures);
  const bool by_rate = c.error_rate > 0 && s.window_requests >= static_cast<std::uint32_t>(c.min_requests) &&
                       s.window_failures * 100 >= static_cast<std::uint32_t>(c.error_rate) * s.window_requests;
  if ((by_streak || by_rate) && s.ejected_until <= now) {
    auto back_off = c.eject_for * (std::int64_t{1} << std::min<std::uint32_t>(s.ejections, 16));
    s.ejected_until = now + std::min(back_off, c.max_eject_for);
    ++s.ejections;
    s.consecutive_failures = 0;
    s.window_requests = 0;  // judged: the next window starts after the ejection
    s.window_failures = 0;
    s.window_start = now;
  }
}

}  // namespace tahua
