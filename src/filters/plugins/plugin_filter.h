#pragma once

#include <memory>

#include "config/config.h"
#include "filters/filter.h"

namespace tahua {

class PluginSet;

// Lua plugins (`plugins:`, Plugin resources; docs/plugins.md). After the router and the
// model check, before the limits: a plugin's on_request sees the routed model, the
// tenant and the key, and may refuse the request (its status and message, in the
// client's API shape), add upstream headers or change body fields before the limits
// estimate it. Which plugins apply to a request is decided from matchers compiled here
// (path, model globs, tenants, keys, headers): no Lua runs to choose. A call runs in
// slices of the plugin's `slice` on the worker's loop, paused in between, so a plugin
// that loops holds the loop for one slice at a time until its CPU budget ends it.
// Response phases (headers, stream events, completion) run synchronously within one
// slice. Left out of the chain when no plugin is configured.
std::unique_ptr<Filter> makePluginFilter(ConfigPtr config, std::shared_ptr<PluginSet> plugins);

}  // namespace tahua
