#include "filters/circuit_breaker/circuit_breaker_filter.h"

#include <algorithm>

#include "core/log.h"

namespace tahua {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint8_t kFailed = 1;
constexpr std::uint8_t kSlow = 2;
constexpr std::size_t kMaxTimedCalls = 10000;  // a time-based window keeps at most this many calls

std::string_view stateName(Breaker::State s) {
  switch (s) {
    case Breaker::State::Closed: return "closed";
    case Breaker::State::Open: return "open";
    case Breaker::State::HalfOpen: return "half_open";
  }
  return "closed";
}

// The breaker that admitted the current attempt, and whether as a half-open probe.
struct BreakerAttempt {
  DeploymentState* slot = nullptr;
  bool admitted = false;
  bool probe = false;
};

class CircuitBreakerFilter final : public FilterWithState<BreakerAttempt> {
 public:
  explicit CircuitBreakerFilter(WorkerMetrics& metrics) : metrics_(metrics) {}
  std::string_view name() const override { return "circuit_breaker"; }

  FilterStatus onUpstreamSelect(RequestContext& ctx) override { return admit(ctx); }
  FilterStatus onReselect(RequestContext& ctx) override { return admit(ctx); }
  void onComplete(RequestContext& ctx) override { judge(ctx); }
  // A failed attempt before a retry or failover is a finished call for the breaker.
  void onAttemptFailed(RequestContext& ctx) override {
    judge(ctx);
    state(ctx) = BreakerAttempt{};
  }

 private:
  FilterStatus admit(RequestContext& ctx) {
    if (!ctx.provider || !ctx.provider->circuit_breaker.enabled || !ctx.deployment_state) return FilterStatus::Continue;
    const CircuitBreakerConfig& cfg = ctx.provider->circuit_breaker;
    Breaker& b = ctx.deployment_state->breaker;
    const auto now = Clock::now();
    if (b.state == Breaker::State::Open && now >= b.open_until) {
      transition(ctx, b, Breaker::State::HalfOpen, "open_for elapsed");
      b.probes_in_flight = 0;
      b.probes_succeeded = 0;
    }
    if (b.state == Breaker::State::Open ||
        (b.state == Breaker::State::HalfOpen && b.probes_in_flight + b.probes_succeeded >= cfg.half_open_probes)) {
      Error e{ErrorKind::CircuitOpen,
              "The upstream for model '" + ctx.facts.model + "' is failing; the gateway stopped sending it requests "
              "for a while. Please retry later."};
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(b.open_until - now).count();
      e.retry_after_seconds = static_cast<int>(std::max<std::int64_t>(1, left + 1));
      ctx.fail(std::move(e));
      return FilterStatus::Stop;
    }
    BreakerAttempt& attempt = state(ctx);
    attempt.admitted = true;
    attempt.slot = ctx.deployment_state;
    if (b.state == Breaker::State::HalfOpen) {
      attempt.probe = true;
      ++b.probes_in_flight;
    }
    return FilterStatus::Continue;
  }

  void judge(RequestContext& ctx) {
    const BreakerAttempt attempt = state(ctx);
    if (!attempt.admitted || !ctx.provider || !attempt.slot) return;
    const CircuitBreakerConfig& cfg = ctx.provider->circuit_breaker;
    Breaker& b = attempt.slot->breaker;
    if (attempt.probe) --b.probes_in_flight;
    // Never sent (a later filter refused it) or the client left: says nothing about the upstream.
    if (ctx.attempts == 0 || ctx.status == 499) return;
    const bool failed = (ctx.error && ctx.error->source() == ErrorSource::Upstream) || ctx.status >= 500;
    const bool slow = cfg.slow_call.count() > 0 && ctx.first_byte && *ctx.first_byte - ctx.start >= cfg.slow_call;
    if (attempt.probe) {
      if (b.state != Breaker::State::HalfOpen) return;  // another probe decided already
      if (failed || slow) {
        open(ctx, b, cfg, "a half-open probe failed");
      } else if (++b.probes_succeeded >= cfg.half_open_probes) {
        transition(ctx, b, Breaker::State::Closed, "half-open probes succeeded");
        b.window.clear();
        b.times.clear();
      }
      return;
    }
    if (b.state != Breaker::State::Closed) return;
    b.window.push_back(static_cast<std::uint8_t>((failed ? kFailed : 0) | (slow ? kSlow : 0)));
    if (cfg.window_duration.count() > 0) {
      // Time-based: the calls that ended within window_duration (bounded in number).
      const auto now = Clock::now();
      b.times.push_back(now);
      while (!b.times.empty() && (now - b.times.front() > cfg.window_duration || b.times.size() > kMaxTimedCalls)) {
        b.times.pop_front();
        b.window.pop_front();
      }
    } else if (static_cast<int>(b.window.size()) > cfg.window) {
      b.window.pop_front();
    }
    const int calls = static_cast<int>(b.window.size());
    if (calls < cfg.min_calls) return;
    const int failures = static_cast<int>(std::count_if(b.window.begin(), b.window.end(), [](auto o) { return o & kFailed; }));
    const int slows = static_cast<int>(std::count_if(b.window.begin(), b.window.end(), [](auto o) { return o & kSlow; }));
    if (failures * 100 >= cfg.failure_rate * calls) open(ctx, b, cfg, "failure rate over threshold");
    else if (cfg.slow_call.count() > 0 && slows * 100 >= cfg.slow_call_rate * calls)
      open(ctx, b, cfg, "slow-call rate over threshold");
  }

  void open(const RequestContext& ctx, Breaker& b, const CircuitBreakerConfig& cfg, std::string_view why) {
    b.open_until = Clock::now() + cfg.open_for;
    b.window.clear();
    b.times.clear();
    transition(ctx, b, Breaker::State::Open, why);
  }

  // The audit trail: every transition is logged and counted.
  void transition(const RequestContext& ctx, Breaker& b, Breaker::State to, std::string_view why) {
    const std::string& provider = ctx.provider->name;
    const std::string deployment = ctx.deployment ? ctx.deployment->id : provider;
    const std::string model = ctx.model ? ctx.model->name : std::string();
    log::warn("circuit breaker", {{"provider", provider}, {"model", model}, {"deployment", deployment},
                                  {"from", stateName(b.state)}, {"to", stateName(to)}, {"reason", why}});
    b.state = to;
    ++metrics_.breaker_transitions[{provider, deployment, std::string(stateName(to))}];
  }

  WorkerMetrics& metrics_;
};

}  // namespace

std::unique_ptr<Filter> makeCircuitBreakerFilter(WorkerMetrics& metrics) {
  return std::make_unique<CircuitBreakerFilter>(metrics);
}

}  // namespace tahua
