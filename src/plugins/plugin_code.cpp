#include "plugins/plugin_code.h"

#include <lua.hpp>

namespace tahua {

const char* pluginPhaseFunction(std::uint8_t phase) {
  switch (phase) {
    case 1: return "on_request";
    case 2: return "on_response_headers";
    case 4: return "on_stream_event";
    case 8: return "on_complete";
    default: return nullptr;
  }
}

std::uint8_t pluginPhaseNamed(std::string_view name) {
  if (name == "request") return 1;
  if (name == "response_headers") return 2;
  if (name == "stream_event") return 4;
  if (name == "complete") return 8;
  return 0;
}

PluginCode checkPluginCode(std::string_view source, std::string_view id, const LuaBudgets& budgets) {
  PluginCode out;
  if (!LuaVm::compile(source, id, out.bytecode, out.error)) return out;
  LuaVm vm(budgets);
  if (!vm.load(out.bytecode, id, out.error)) return out;
  for (std::uint8_t bit : kPluginPhaseBits)
    if (vm.function(pluginPhaseFunction(bit)) != LUA_NOREF) out.phases |= bit;
  if (out.phases == 0) out.error = "the plugin's table defines none of on_request, on_response_headers, on_stream_event, on_complete";
  return out;
}

}  // namespace tahua
