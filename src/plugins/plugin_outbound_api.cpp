// The plugin API's calls that leave the Lua state: tahua.kv (the state store) and
// tahua.http (hosts on the plugin's allow-list). A read or a request suspends the call
// (LuaVm::wait); the worker answers it (filters/plugins/plugin_set.cpp). The rules of
// plugin_api.cpp hold here: no C++ object with a destructor across a Lua call that may
// raise; C++ work in guarded().
#include <algorithm>
#include <array>
#include <chrono>
#include <lua.hpp>
#include <optional>

#include "core/ascii.h"
#include "plugins/lua_sandbox.h"
#include "plugins/plugin_api.h"
#include "plugins/plugin_api_detail.h"
#include "plugins/plugin_host.h"

namespace tahua::plugin_api_detail {

PluginCallView& runningCall(lua_State* L, const char* what) {
  auto* rt = static_cast<PluginRuntime*>(lua_touserdata(L, lua_upvalueindex(1)));
  if (!rt->call) luaL_error(L, "%s is only available in a phase function", what);
  return *rt->call;
}

namespace {

// tahua.kv (upvalue 1: the runtime; upvalue 2: true for tahua.kv.shared).
std::string_view kvKeyArg(lua_State* L, const char* what) {
  std::size_t n = 0;
  const char* key = luaL_checklstring(L, 1, &n);
  if (n == 0 || n > kMaxPluginKvKey) luaL_error(L, "%s: a key has 1 to 256 bytes", what);
  return {key, n};
}

// get(key): the value (a string), or nil when there is none; nil and "unavailable" when
// the store cannot answer. Suspends the call until the store answers: only in the phases
// that may wait (on_request, on_auth).
int apiKvGet(lua_State* L) {
  auto* rt = static_cast<PluginRuntime*>(lua_touserdata(L, lua_upvalueindex(1)));
  PluginCallView& call = runningCall(L, "tahua.kv.get");
  const std::string_view key = kvKeyArg(L, "tahua.kv.get");
  if (call.phase != kPluginRequest && call.phase != kPluginAuth)
    return luaL_error(L, "tahua.kv.get is only available in on_request and on_auth (put and erase work in every phase)");
  if (!lua_isyieldable(L)) return luaL_error(L, "tahua.kv.get cannot wait here (inside a callback of a C function)");
  if (call.gets_left <= 0) return luaL_error(L, "tahua.kv.get: at most 32 per call");
  --call.gets_left;
  const bool shared = lua_toboolean(L, lua_upvalueindex(2));
  if (!guarded([&] {
        call.wait.kind = PluginWait::Kind::KvGet;
        call.wait.key = rt->instance.kvKey(key, shared);
      }))
    return luaL_error(L, "not enough memory");
  return LuaVm::wait(L);
}

// put(key, value [, ttl_seconds]) and erase(key): made when the call returns normally
// (not read back within the call), in any phase.
int kvWrite(lua_State* L, bool erase) {
  auto* rt = static_cast<PluginRuntime*>(lua_touserdata(L, lua_upvalueindex(1)));
  const char* what = erase ? "tahua.kv.erase" : "tahua.kv.put";
  PluginCallView& call = runningCall(L, what);
  const std::string_view key = kvKeyArg(L, what);
  std::string_view value;
  lua_Integer ttl = 3600;
  if (!erase) {
    if (lua_type(L, 2) != LUA_TSTRING && lua_type(L, 2) != LUA_TNUMBER) return luaL_error(L, "tahua.kv.put: the value is a string or a number");
    std::size_t n = 0;
    const char* v = lua_tolstring(L, 2, &n);  // a number becomes its text (on the stack, kept)
    if (n > kMaxPluginKvValue) return luaL_error(L, "tahua.kv.put: a value has at most 65536 bytes");
    value = {v, n};
    ttl = luaL_optinteger(L, 3, 3600);
    if (ttl < 1 || ttl > kMaxPluginKvTtlSeconds) return luaL_error(L, "tahua.kv.put: the ttl is 1 second to 30 days");
  }
  if (call.writes.size() >= kMaxPluginKvWrites) return luaL_error(L, "%s: at most 16 writes per call", what);
  const bool shared = lua_toboolean(L, lua_upvalueindex(2));
  if (!guarded([&] {
        call.writes.push_back(PluginKvWrite{rt->instance.kvKey(key, shared), std::string(value), Millis(ttl * 1000), erase});
      }))
    return luaL_error(L, "not enough memory");
  return 0;
}
int apiKvPut(lua_State* L) { return kvWrite(L, false); }
int apiKvErase(lua_State* L) { return kvWrite(L, true); }

// tahua.http.request{url =, method =, headers =, body =, timeout =}: the answer
// {status, body, headers} or nil and the error ("not allowed", "timeout", "breaker open",
// "connect: ...", "response too large"). Suspends the call until the answer (or the
// timeout): only in on_request and on_auth. The host must be on the manifest's
// `http.allow`; the call's bounds are the manifest's.
bool allowedHost(const PluginConfig& c, const HttpUrl& url) {
  for (const auto& [host, port] : c.http.allow)
    if (iequals(host, url.host) && (port.empty() || port == url.port)) return true;
  return false;
}

int apiHttpRequest(lua_State* L) {
  auto* rt = static_cast<PluginRuntime*>(lua_touserdata(L, lua_upvalueindex(1)));
  PluginCallView& call = runningCall(L, "tahua.http.request");
  luaL_checktype(L, 1, LUA_TTABLE);
  if (call.phase != kPluginRequest && call.phase != kPluginAuth)
    return luaL_error(L, "tahua.http.request is only available in on_request and on_auth");
  if (!lua_isyieldable(L)) return luaL_error(L, "tahua.http.request cannot wait here (inside a callback of a C function)");
  if (call.http_left <= 0) return luaL_error(L, "tahua.http.request: at most 4 per call");
  // Everything read first as views into the table's strings (kept alive by the table),
  // then the request built in one guarded step: no C++ object lives across a Lua call
  // that may raise.
  auto field = [&](const char* name, int type, const char* expect) -> std::string_view {
    lua_pushstring(L, name);
    const int t = lua_rawget(L, 1);
    if (t == LUA_TNIL) {
      lua_pop(L, 1);
      return {};
    }
    if (t != type) luaL_error(L, "tahua.http.request: `%s` must be %s", name, expect);
    std::size_t n = 0;
    const char* p = type == LUA_TSTRING ? lua_tolstring(L, -1, &n) : nullptr;
    lua_pop(L, 1);  // the table still holds the string
    return {p, n};
  };
  const std::string_view url = field("url", LUA_TSTRING, "a string");
  if (url.empty()) return luaL_error(L, "tahua.http.request: `url` is required");
  std::string_view method = field("method", LUA_TSTRING, "a string");
  const std::string_view body = field("body", LUA_TSTRING, "a string");
  if (body.size() > kMaxPluginHttpBody) return luaL_error(L, "tahua.http.request: a body has at most 65536 bytes");
  if (method.empty()) method = body.empty() ? "GET" : "POST";
  bool known = false;
  for (std::string_view m : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}) known = known || m == method;
  if (!known) return luaL_error(L, "tahua.http.request: `method` is one of GET, HEAD, POST, PUT, PATCH, DELETE");
  const PluginConfig& cfg = rt->instance.config();
  lua_Number timeout_s = std::chrono::duration<double>(cfg.http.timeout).count();
  lua_pushliteral(L, "timeout");
  if (const int t = lua_rawget(L, 1); t == LUA_TNUMBER) timeout_s = std::min(timeout_s, lua_tonumber(L, -1));
  else if (t != LUA_TNIL) return luaL_error(L, "tahua.http.request: `timeout` is a number of seconds");
  lua_pop(L, 1);
  if (!(timeout_s > 0)) return luaL_error(L, "tahua.http.request: `timeout` must be positive");
  std::array<std::pair<std::string_view, std::string_view>, kMaxHeadersSet> headers;
  std::size_t nheaders = 0;
  lua_pushliteral(L, "headers");
  const int ht = lua_rawget(L, 1);
  if (ht == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2) != 0) {
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
        return luaL_error(L, "tahua.http.request: `headers` maps names to strings");
      if (nheaders >= headers.size()) return luaL_error(L, "tahua.http.request: at most 32 headers");
      std::size_t kn = 0, vn = 0;
      const char* k = lua_tolstring(L, -2, &kn);
      const char* v = lua_tolstring(L, -1, &vn);
      const std::string_view name(k, kn), value(v, vn);
      if (!tokenName(name) || !headerValue(value)) return luaL_error(L, "tahua.http.request: invalid header %s", k);
      for (std::string_view r : {"host", "content-length", "transfer-encoding", "connection", "te", "upgrade", "keep-alive"})
        if (iequals(name, r)) return luaL_error(L, "tahua.http.request: %s is set by the gateway", k);
      headers[nheaders++] = {name, value};
      lua_pop(L, 1);
    }
  } else if (ht != LUA_TNIL) {
    return luaL_error(L, "tahua.http.request: `headers` must be a table");
  }
  lua_pop(L, 1);  // the headers table (still held by the options table)
  enum class Bad { None, Url, NotAllowed, Memory } bad = Bad::None;
  std::string* why = &call.scratch();
  if (!guarded([&] {
        std::optional<HttpUrl> parsed = parseHttpUrl(url, why, true);
        if (!parsed) {
          bad = Bad::Url;
          return;
        }
        if (!allowedHost(cfg, *parsed)) {
          bad = Bad::NotAllowed;
          *why = parsed->host + ":" + parsed->port;
          return;
        }
        OutboundRequest& r = call.wait.http;
        r = OutboundRequest{};
        r.method.assign(method);
        r.url = std::move(*parsed);
        r.body.assign(body);
        for (std::size_t i = 0; i < nheaders; ++i) r.headers.emplace_back(std::string(headers[i].first), std::string(headers[i].second));
        r.timeout = std::max(Millis(1), Millis(static_cast<std::int64_t>(timeout_s * 1000)));
        r.max_response_bytes = cfg.http.max_response_bytes;
        call.wait.kind = PluginWait::Kind::Http;
      }))
    bad = Bad::Memory;
  switch (bad) {
    case Bad::None: break;
    case Bad::Url: return luaL_error(L, "tahua.http.request: %s", why->c_str());
    case Bad::NotAllowed:
      // Not an error of the call: the plugin hears it like any failed request.
      rt->instance.countHttpRefused();
      lua_pushnil(L);
      lua_pushfstring(L, "not allowed: %s is not on the plugin's http.allow list", why->c_str());
      return 2;
    case Bad::Memory: return luaL_error(L, "not enough memory");
  }
  --call.http_left;
  return LuaVm::wait(L);
}

void pushKvTable(lua_State* L, PluginRuntime* rt, bool shared) {
  lua_createtable(L, 0, 3);
  const luaL_Reg fns[] = {{"get", apiKvGet}, {"put", apiKvPut}, {"erase", apiKvErase}};
  for (const auto& f : fns) {
    lua_pushlightuserdata(L, rt);
    lua_pushboolean(L, shared);
    lua_pushcclosure(L, f.func, 2);
    lua_setfield(L, -2, f.name);
  }
}

}  // namespace

void installOutboundApi(lua_State* L, PluginRuntime* rt) {
  pushKvTable(L, rt, false);
  if (rt->instance.config().kv_shared) {  // opted into: the namespace every such plugin shares
    pushKvTable(L, rt, true);
    lua_setfield(L, -2, "shared");
  }
  lua_setfield(L, -2, "kv");
  if (!rt->instance.config().http.allow.empty()) {  // only for a plugin with an allow-list
    lua_createtable(L, 0, 1);
    lua_pushlightuserdata(L, rt);
    lua_pushcclosure(L, apiHttpRequest, 1);
    lua_setfield(L, -2, "request");
    lua_setfield(L, -2, "http");
  }
}

}  // namespace tahua::plugin_api_detail
