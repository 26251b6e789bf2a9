// What the files of the plugin API share (plugin_api.cpp, plugin_outbound_api.cpp):
// the bounds of header names and values, guarded() for C++ work between Lua calls (Lua
// raises errors with longjmp: see plugin_api.cpp), and the call an API function runs in.
#pragma once

#include <cstddef>
#include <string_view>

struct lua_State;

namespace tahua {

struct PluginCallView;
struct PluginRuntime;

namespace plugin_api_detail {

constexpr std::size_t kMaxHeaderName = 64;
constexpr std::size_t kMaxHeaderValue = 4096;
constexpr std::size_t kMaxHeadersSet = 32;

template <class Fn>
bool guarded(Fn&& fn) noexcept {
  try {
    fn();
    return true;
  } catch (...) {
    return false;
  }
}

inline bool tokenName(std::string_view name) {
  if (name.empty() || name.size() > kMaxHeaderName) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return false;
  return true;
}

inline bool headerValue(std::string_view v) {
  if (v.size() > kMaxHeaderValue) return false;
  for (char c : v)
    if (c == '\r' || c == '\n' || c == '\0') return false;
  return true;
}

// The call running on the runtime of upvalue 1; a Lua error outside a phase function
// (the top level, at load).
PluginCallView& runningCall(lua_State* L, const char* what);

// tahua.kv (and tahua.kv.shared when the plugin opted in) and tahua.http (when it has an
// allow-list), set in the table on top of L's stack.
void installOutboundApi(lua_State* L, PluginRuntime* rt);

}  // namespace plugin_api_detail
}  // namespace tahua
