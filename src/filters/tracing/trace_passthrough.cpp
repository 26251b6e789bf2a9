#include "filters/tracing/trace_passthrough.h"

#include "request/request_context.h"
#include "telemetry/trace_context.h"

namespace tahua {
namespace {

// W3C Trace Context for a gateway that does not trace: a caller's `traceparent` and
// `tracestate` reach every upstream attempt as they came (an application that traces,
// behind tahua, in front of a server that traces, keeps one trace). Only a traceparent
// that parses is passed on, with the tracestate that goes with it; neither is changed.
class TracePassthroughFilter final : public Filter {
 public:
  std::string_view name() const override { return "trace_passthrough"; }
  void onUpstreamRequest(RequestContext& ctx, UpstreamRequestHeaders& headers) override {
    if (!ctx.headers) return;
    const std::string_view parent = ctx.headers->get("traceparent");
    TraceContext parsed;
    if (!parseTraceparent(parent, parsed)) return;
    headers.add("traceparent", parent);
    const std::string_view state = ctx.headers->get("tracestate");
    if (tracestatePassable(state)) headers.add("tracestate", state);
  }
};

}  // namespace

std::unique_ptr<Filter> makeTracePassthroughFilter() { return std::make_unique<TracePassthroughFilter>(); }

}  // namespace tahua
