// The plugins of one config snapshot on one worker, shared by the plugin filter and by
// the auth links that name a plugin: their instances (Lua states, breakers, metrics) and
// the thread their long calls finish on. Built with the worker's filter chain; the
// filters that use it keep it alive.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "plugins/plugin_host.h"

namespace tahua {

class PluginThread;
class WorkerServices;
struct WorkerMetrics;

class PluginSet {
 public:
  PluginSet(const Config& config, WorkerServices& worker, WorkerMetrics& metrics);
  // Joins the plugin thread first: no call runs on a runtime that is gone.
  ~PluginSet();
  PluginSet(const PluginSet&) = delete;
  PluginSet& operator=(const PluginSet&) = delete;

  // In config order (by `order`); at most kMaxPlugins.
  const std::vector<std::unique_ptr<PluginInstance>>& instances() const { return instances_; }
  PluginInstance* find(std::string_view id) const;
  static constexpr std::size_t kMaxPlugins = 128;  // the loader's bound too

  // The rest of a call that used up its first slice on the event loop: it runs on the
  // plugin thread (at idle priority) with `rt` busy meanwhile, then `done` runs on the
  // worker with `rt` free again, unless the set is gone by then (the worker stopping).
  // `call` and `ctx` must stay put until then.
  void offload(PluginInstance& in, std::shared_ptr<PluginRuntime> rt, LuaCall& call, const RequestContext& ctx,
               std::function<void()> done);

 private:
  WorkerServices& worker_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for the plugin thread's answers
  std::vector<std::unique_ptr<PluginInstance>> instances_;
  // Declared last: destroyed (joined) first.
  std::unique_ptr<PluginThread> thread_;
};

}  // namespace tahua
