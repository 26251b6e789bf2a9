#include "plugins/plugin_code.h"

#include <lua.hpp>

namespace tahua {

PluginCode checkPluginCode(std::string_view source, std::string_view id, const LuaBudgets& budgets) {
  PluginCode out;
  if (!LuaVm::compile(source, id, out.bytecode, out.error)) return out;
  LuaVm vm(budgets);
  if (!vm.load(out.bytecode, id, out.error)) return out;
  for (std::uint8_t bit : kPluginPhaseBits)
    if (vm.function(pluginPhaseFunction(bit)) != LUA_NOREF) out.phases |= bit;
  if (out.phases == 0) out.error = "the plugin's table defines none of on_request, on_response_headers, on_stream_event, on_complete, on_auth";
  return out;
}

std::string compilePlugin(PluginConfig& plugin, std::string_view source) {
  PluginCode code = checkPluginCode(source, plugin.id, LuaBudgets{plugin.memory_bytes, plugin.cpu, plugin.slice});
  if (!code.error.empty()) return code.error;
  plugin.phases = code.phases;
  plugin.bytecode = std::make_shared<const std::string>(std::move(code.bytecode));
  return "";
}

}  // namespace tahua
