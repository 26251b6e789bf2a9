// A plugin's code as the config loader sees it: compiled, and instantiated once in a
// scratch sandbox with the plugin's budgets, so that a chunk that does not compile, whose
// top level fails or overruns, or that defines no phase is refused before any worker
// runs it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "config/plugin_config.h"
#include "plugins/lua_sandbox.h"

namespace tahua {

struct PluginCode {
  std::string bytecode;
  std::uint8_t phases = 0;  // the phase functions its table defines
  std::string error;        // set when refused
};
PluginCode checkPluginCode(std::string_view source, std::string_view id, const LuaBudgets& budgets);

}  // namespace tahua
