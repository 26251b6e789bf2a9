// Runs a plugin's `tests:` (PluginTest fixtures) against its on_request, at load, on the
// loader's thread: each fixture becomes a request context, the call runs to its end
// within the plugin's budgets, and what it did is compared with what the fixture expects.
#pragma once

#include <string>

#include "config/plugin_config.h"

namespace tahua {

// "" when every test passes; else the first failure: "test 'name': what differed".
std::string runPluginTests(const PluginConfig& plugin);

}  // namespace tahua
