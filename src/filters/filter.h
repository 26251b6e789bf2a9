// The request pipeline. A request flows through an ordered chain of filters, phase by
// phase (see docs/life-of-a-request.md):
//
//   onRequestHeaders -> onRequestBody -> onUpstreamSelect      (may stop the request)
//   -> [upstream exchange] -> onResponseHeaders -> onResponseChunk*  (observe only)
//   -> onComplete                                                 (always, error or not)
//
// A filter is created per worker from the config snapshot (so it may keep per-worker
// state without locks) and called for every request on that worker. Every hook has a
// pass-through default, so a filter overrides only the phases it cares about.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "filters/context.h"

namespace tahua {

enum class FilterStatus {
  Continue,  // go on with the next filter / phase
  Stop,      // the filter set ctx.error or ctx.local_reply; answer now, skip the upstream
  Wait,      // (onUpstreamSelect) the request must wait for a slot (ctx.bulkhead_wait); the
             // session waits, then resumes the chain at the same filter
};

class Filter {
 public:
  virtual ~Filter() = default;
  virtual std::string_view name() const = 0;

  // Headers are known, the body has been read but not inspected.
  virtual FilterStatus onRequestHeaders(RequestContext&) { return FilterStatus::Continue; }
  // The body is in ctx.body; filters may inspect or rewrite it.
  virtual FilterStatus onRequestBody(RequestContext&) { return FilterStatus::Continue; }
  // Choose the upstream: the router sets ctx.model, the balancer ctx.deployment / ctx.provider.
  virtual FilterStatus onUpstreamSelect(RequestContext&) { return FilterStatus::Continue; }
  // An upstream attempt failed before anything reached the client and the gateway will
  // try again (another deployment of the model, or a fallback model): account for it
  // as a finished, failed call of ctx.deployment (ctx.status / ctx.error say how).
  virtual void onAttemptFailed(RequestContext&) {}
  // After onAttemptFailed: choose again for ctx.model (possibly a fallback), avoiding
  // the deployments in ctx.tried. May Stop (e.g. every breaker open).
  virtual FilterStatus onReselect(RequestContext&) { return FilterStatus::Continue; }
  // The upstream answered (ctx.status, ctx.streaming are set); nothing written yet.
  virtual void onResponseHeaders(RequestContext&) {}
  // A piece of the response body as it goes to the client (synchronous: called per
  // chunk, so it must be cheap).
  virtual void onResponseChunk(RequestContext&, std::string_view) {}
  // Always runs last, once, whatever happened (local reply, error, client gone).
  virtual void onComplete(RequestContext&) {}
};

class FilterChain {
 public:
  void add(std::unique_ptr<Filter> filter) { filters_.push_back(std::move(filter)); }

  FilterStatus requestHeaders(RequestContext& ctx);
  FilterStatus requestBody(RequestContext& ctx);
  FilterStatus upstreamSelect(RequestContext& ctx);
  // After a Wait: the same phase again, from the filter that asked to wait.
  FilterStatus resumeUpstreamSelect(RequestContext& ctx);
  void attemptFailed(RequestContext& ctx);
  FilterStatus reselect(RequestContext& ctx);  // clears the previous attempt's error first
  void responseHeaders(RequestContext& ctx);
  void responseChunk(RequestContext& ctx, std::string_view bytes);
  void complete(RequestContext& ctx);

  std::size_t size() const { return filters_.size(); }

 private:
  std::vector<std::unique_ptr<Filter>> filters_;
};

}  // namespace tahua
