// The API a plugin's code sees (docs/plugins.md, "The phases"): the call object of
// on_request and on_response_headers (its fields and methods) and the `tahua` table.
// What a call asks for is recorded in its PluginEffects; the plugin filter applies it
// when the call returns normally.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

struct lua_State;

namespace boost::json {
class value;
}

namespace tahua {

struct PluginCallView;
struct PluginRuntime;

constexpr int kMaxPluginLogLines = 16;   // tahua.log lines per call
constexpr std::size_t kMaxPluginCounters = 32;  // tahua.count names per plugin
constexpr int kMaxPluginKvGets = 32;            // tahua.kv.get per call
constexpr std::size_t kMaxPluginKvWrites = 16;  // tahua.kv.put / erase per call
constexpr std::size_t kMaxPluginKvKey = 256;
constexpr std::size_t kMaxPluginKvValue = 64 << 10;
constexpr long long kMaxPluginKvTtlSeconds = 30LL * 24 * 3600;
constexpr int kMaxPluginHttpCalls = 4;          // tahua.http.request per call
constexpr std::size_t kMaxPluginHttpBody = 64 << 10;

// The call object's metatable and the `tahua` table, in a runtime's fresh state.
void installPluginApi(lua_State* L, PluginRuntime* rt);
// Pushes a call object for `view` on `thread`; `handle_ref` keeps it until endCallObject.
void pushCallObject(lua_State* thread, PluginCallView& view, int& handle_ref);
// The call ended: the object (if the plugin kept it) no longer reaches the view.
void endCallObject(lua_State* L, int handle_ref);

// A dotted path's segments ("metadata.user": metadata, user); false if malformed.
bool splitJsonPath(std::string_view path, std::vector<std::string_view>& out);
// The value at a dotted path (objects by key, arrays by index), or null.
const boost::json::value* jsonAt(const boost::json::value* v, std::string_view path) noexcept;
// A segment naming an array's element ("0".."999999999"); false if it is no index.
bool arrayIndex(std::string_view seg, std::size_t& index) noexcept;
// Why `set_field(path, ...)` cannot write into `root` (null: it can). Objects on the way
// may be missing (they are made); an array needs an index within it; a string, number
// or boolean in the way cannot be written through.
const char* unwritablePath(const boost::json::value* root, std::span<const std::string_view> segs) noexcept;

}  // namespace tahua
