#include "filters/plugins/plugin_set.h"

#include <algorithm>
#include <chrono>

#include "filters/worker_services.h"
#include "plugins/plugin_thread.h"

namespace tahua {

PluginSet::PluginSet(const Config& config, WorkerServices& worker, WorkerMetrics& metrics) : worker_(worker) {
  for (std::size_t i = 0; i < config.plugins.size() && i < kMaxPlugins; ++i)
    instances_.push_back(std::make_unique<PluginInstance>(config.plugins[i], metrics));
}

PluginSet::~PluginSet() = default;

PluginInstance* PluginSet::find(std::string_view id) const {
  for (const auto& in : instances_)
    if (in->config().id == id) return in.get();
  return nullptr;
}

void PluginSet::offload(PluginInstance& in, std::shared_ptr<PluginRuntime> rt, LuaCall& call, const RequestContext& ctx,
                        std::function<void()> done) {
  rt->busy = true;
  if (!thread_) thread_ = std::make_unique<PluginThread>();
  // The CPU budget ends a looping call; the wall deadline ends one that the machine's
  // other work starves (idle priority), with room for a busy machine.
  const auto deadline = std::chrono::steady_clock::now() + std::max<std::chrono::microseconds>(10 * in.config().cpu, std::chrono::seconds(1));
  WorkerServices& worker = worker_;
  std::weak_ptr<bool> alive = alive_;
  thread_->post([&worker, &in, rt, &call, &ctx, deadline, alive, done = std::move(done)]() mutable {
    in.runToEnd(*rt, call, ctx, deadline);
    worker.post([rt = std::move(rt), alive = std::move(alive), done = std::move(done)] {
      if (alive.expired()) return;  // the set is gone (its worker stopping): so is the request
      rt->busy = false;
      done();
    });
  });
}

}  // namespace tahua
