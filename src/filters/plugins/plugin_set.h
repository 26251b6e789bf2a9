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
class StateStore;
class WorkerServices;
struct WorkerMetrics;

class PluginSet {
 public:
  // `store` holds the plugins' key-value data (tahua.kv).
  PluginSet(const Config& config, WorkerServices& worker, WorkerMetrics& metrics, StateStore& store);
  // Joins the plugin thread first: no call runs on a runtime that is gone.
  ~PluginSet();
  PluginSet(const PluginSet&) = delete;
  PluginSet& operator=(const PluginSet&) = delete;

  // In config order (by `order`); at most kMaxPlugins.
  const std::vector<std::unique_ptr<PluginInstance>>& instances() const { return instances_; }
  PluginInstance* find(std::string_view id) const;
  static constexpr std::size_t kMaxPlugins = 128;  // the loader's bound too

  // Canary versions (canary.of): for each, its index and its stable plugin's (npos when
  // that plugin is not loaded: the canary then runs alone, for its share).
  struct CanaryPair {
    std::size_t stable = static_cast<std::size_t>(-1);
    std::size_t canary = 0;
  };
  const std::vector<CanaryPair>& canaries() const { return canaries_; }
  // Whether `ctx` is on the canary side of `canary` (a hash of its sticky header, the API
  // key, or the request id, against its percent).
  static bool takesCanary(const PluginConfig& canary, const RequestContext& ctx);
  // The plugin `in` or its canary, for this request.
  PluginInstance* versionFor(PluginInstance* in, const RequestContext& ctx) const;

  // The rest of a call of a phase that may wait (request, auth) whose step on the loop
  // returned `step` (Yielded or Waiting): its CPU beyond the first slice runs on the
  // plugin thread (at idle priority, `rt` busy meanwhile), its store reads are made here
  // on the worker (the call resumed with the answer), and `done` runs on the worker once
  // the call is Done or Failed — unless the set is gone by then (the worker stopping).
  // `call` and `view` (and the request) must stay put until then.
  void continueCall(PluginInstance& in, std::shared_ptr<PluginRuntime> rt, LuaCall& call, PluginCallView& view, LuaStep step,
                    std::function<void()> done);

 private:
  void offload(PluginInstance& in, std::shared_ptr<PluginRuntime> rt, LuaCall& call, PluginCallView& view, std::function<void()> done);
  void serveWait(PluginInstance& in, std::shared_ptr<PluginRuntime> rt, LuaCall& call, PluginCallView& view, std::function<void()> done);
  void serveHttp(PluginInstance& in, std::shared_ptr<PluginRuntime> rt, LuaCall& call, PluginCallView& view, std::function<void()> done);

  WorkerServices& worker_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for the plugin thread's answers
  std::vector<std::unique_ptr<PluginInstance>> instances_;
  std::vector<CanaryPair> canaries_;
  // Declared last: destroyed (joined) first.
  std::unique_ptr<PluginThread> thread_;
};

}  // namespace tahua
