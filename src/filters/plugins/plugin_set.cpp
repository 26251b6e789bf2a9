#include "filters/plugins/plugin_set.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "filters/worker_services.h"
#include "plugins/plugin_thread.h"
#include "request/request_context.h"
#include "store/state_store.h"

namespace tahua {

PluginSet::PluginSet(const Config& config, WorkerServices& worker, WorkerMetrics& metrics, StateStore& store) : worker_(worker) {
  for (std::size_t i = 0; i < config.plugins.size() && i < kMaxPlugins; ++i)
    instances_.push_back(std::make_unique<PluginInstance>(config.plugins[i], metrics, &store));
  for (std::size_t i = 0; i < instances_.size(); ++i) {
    const PluginCanaryConfig& c = instances_[i]->config().canary;
    if (c.of.empty()) continue;
    CanaryPair pair;
    pair.canary = i;
    for (std::size_t j = 0; j < instances_.size(); ++j)
      if (instances_[j]->config().id == c.of && instances_[j]->config().canary.of.empty()) pair.stable = j;
    canaries_.push_back(pair);
  }
}

bool PluginSet::takesCanary(const PluginConfig& canary, const RequestContext& ctx) {
  const PluginCanaryConfig& c = canary.canary;
  if (c.percent <= 0) return false;
  if (c.percent >= 100) return true;
  std::string_view basis;
  if (ctx.headers) {
    basis = c.sticky_header.empty() ? ctx.headers->get("authorization") : ctx.headers->get(c.sticky_header);
    if (basis.empty() && c.sticky_header.empty()) basis = ctx.headers->get("x-api-key");
  }
  if (basis.empty()) basis = ctx.request_id;  // nothing sticky: this request alone
  // std::hash of a string is the same in every replica of one build: a user is on one
  // side everywhere. Salted with the plugin's id so two canaries split independently.
  const std::size_t h = std::hash<std::string_view>{}(basis) ^ (std::hash<std::string_view>{}(canary.id) * 0x9e3779b97f4a7c15ULL);
  return static_cast<double>((h >> 7) % 10'000) < c.percent * 100;
}

PluginInstance* PluginSet::versionFor(PluginInstance* in, const RequestContext& ctx) const {
  if (!in) return nullptr;
  for (const CanaryPair& p : canaries_)
    if (p.stable != static_cast<std::size_t>(-1) && instances_[p.stable].get() == in) {
      PluginInstance* canary = instances_[p.canary].get();
      return takesCanary(canary->config(), ctx) ? canary : in;
    }
  return in;
}

PluginSet::~PluginSet() = default;

PluginInstance* PluginSet::find(std::string_view id) const {
  for (const auto& in : instances_)
    if (in->config().id == id) return in.get();
  return nullptr;
}

void PluginSet::continueCall(PluginInstance& in, std::shared_ptr<PluginRuntime> rt, LuaCall& call, PluginCallView& view, LuaStep step,
                             std::function<void()> done) {
  switch (step) {
    case LuaStep::Yielded: offload(in, std::move(rt), call, view, std::move(done)); return;
    case LuaStep::Waiting: serveWait(in, std::move(rt), call, view, std::move(done)); return;
    case LuaStep::Done:
    case LuaStep::Failed: done(); return;
  }
}

void PluginSet::offload(PluginInstance& in, std::shared_ptr<PluginRuntime> rt, LuaCall& call, PluginCallView& view,
                        std::function<void()> done) {
  rt->busy = true;
  if (!thread_) thread_ = std::make_unique<PluginThread>();
  // The CPU budget ends a looping call; the wall deadline ends one that the machine's
  // other work starves (idle priority), with room for a busy machine.
  const auto deadline = std::chrono::steady_clock::now() + std::max<std::chrono::microseconds>(10 * in.config().cpu, std::chrono::seconds(1));
  WorkerServices& worker = worker_;
  std::weak_ptr<bool> alive = alive_;
  thread_->post([this, &worker, &in, rt, &call, &view, deadline, alive, done = std::move(done)]() mutable {
    const LuaStep step = in.runToEnd(*rt, call, view, deadline);
    worker.post([this, &in, rt = std::move(rt), &call, &view, step, alive = std::move(alive), done = std::move(done)]() mutable {
      if (alive.expired()) return;  // the set is gone (its worker stopping): so is the request
      rt->busy = false;
      continueCall(in, std::move(rt), call, view, step, std::move(done));
    });
  });
}

void PluginSet::serveWait(PluginInstance& in, std::shared_ptr<PluginRuntime> rt, LuaCall& call, PluginCallView& view,
                          std::function<void()> done) {
  if (view.wait.kind == PluginWait::Kind::Http) {
    serveHttp(in, std::move(rt), call, view, std::move(done));
    return;
  }
  StateStore* store = in.store();
  if (!store || view.wait.kind != PluginWait::Kind::KvGet) {  // nothing to ask: nothing found
    const LuaStep step = in.resumeWith(*rt, call, view, nullptr, {});
    continueCall(in, std::move(rt), call, view, step, std::move(done));
    return;
  }
  std::weak_ptr<bool> alive = alive_;
  // The runtime stays free meanwhile: other calls may run on it (a call's own state is in
  // its view), so a store that is slow to answer does not use up the plugin's runtimes.
  store->getValue(view.wait.key, [this, &in, rt = std::move(rt), &call, &view, alive = std::move(alive),
                                  done = std::move(done)](StateStore::ValueResult r) mutable {
    if (alive.expired()) return;
    using Status = StateStore::ValueResult::Status;
    in.countKvGet(r.status == Status::Found ? 0 : r.status == Status::Missing ? 1 : 2);
    const LuaStep step = in.resumeWith(*rt, call, view, r.status == Status::Found ? &r.value : nullptr,
                                       r.status == Status::Unavailable ? "unavailable" : "");
    continueCall(in, std::move(rt), call, view, step, std::move(done));
  });
}

void PluginSet::serveHttp(PluginInstance& in, std::shared_ptr<PluginRuntime> rt, LuaCall& call, PluginCallView& view,
                          std::function<void()> done) {
  OutboundRequest request = std::move(view.wait.http);
  if (in.httpBreakerOpen(request.url, std::chrono::steady_clock::now())) {
    OutboundResponse refused;
    refused.error = "breaker open";
    in.countHttpBreakerOpen();
    const LuaStep step = in.resumeWithHttp(*rt, call, view, refused);
    continueCall(in, std::move(rt), call, view, step, std::move(done));
    return;
  }
  const HttpUrl url = request.url;
  std::weak_ptr<bool> alive = alive_;
  // Time spent here is outside the call's CPU budget; the request's own deadline and the
  // manifest's http.timeout bound it.
  worker_.fetch(std::move(request), [this, &in, rt = std::move(rt), &call, &view, url, alive = std::move(alive),
                                     done = std::move(done)](OutboundResponse response) mutable {
    if (alive.expired()) return;
    in.httpAnswered(url, response);
    const LuaStep step = in.resumeWithHttp(*rt, call, view, response);
    continueCall(in, std::move(rt), call, view, step, std::move(done));
  });
}

}  // namespace tahua
