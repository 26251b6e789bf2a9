#include "filters/bulkhead/bulkhead_filter.h"

namespace tahua {
namespace {

class BulkheadFilter final : public Filter {
 public:
  BulkheadFilter(BulkheadCounters& counters, unsigned workers) : c_(counters), workers_(workers == 0 ? 1 : workers) {}
  std::string_view name() const override { return "bulkhead"; }

  // After the body, so `stream` is known; before the upstream is chosen.
  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    if (ctx.endpoint == Endpoint::Models || ctx.endpoint == Endpoint::None) return FilterStatus::Continue;
    const LimitsConfig& limits = ctx.config->limits;
    if (over(limits.max_concurrent_requests, c_.requests) ||
        (ctx.facts.stream && over(limits.max_concurrent_streams, c_.streams))) {
      Error e{ErrorKind::ConcurrencyLimited, "Too many concurrent requests; please retry shortly."};
      e.retry_after_seconds = 1;
      ctx.fail(std::move(e));
      return FilterStatus::Stop;
    }
    ++c_.requests;
    if (ctx.facts.stream) ++c_.streams;
    ctx.bulkhead_admitted = true;
    return FilterStatus::Continue;
  }

  void onComplete(RequestContext& ctx) override {
    if (!ctx.bulkhead_admitted) return;
    --c_.requests;
    if (ctx.facts.stream) --c_.streams;
  }

 private:
  bool over(std::size_t limit, std::size_t current) const {
    if (limit == 0) return false;
    return current >= (limit + workers_ - 1) / workers_;
  }

  BulkheadCounters& c_;
  std::size_t workers_;
};

}  // namespace

std::unique_ptr<Filter> makeBulkheadFilter(BulkheadCounters& counters, unsigned workers) {
  return std::make_unique<BulkheadFilter>(counters, workers);
}

}  // namespace tahua
