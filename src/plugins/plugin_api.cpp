#include "plugins/plugin_api.h"

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <chrono>
#include <lua.hpp>

#include "core/ascii.h"
#include "plugins/plugin_api_detail.h"
#include "plugins/plugin_host.h"
#include "request/request_context.h"

// Lua raises errors with longjmp: the API functions below hold no C++ object with a
// destructor while they call the Lua API. C++ work that allocates runs in guarded(),
// which catches everything and returns before Lua is called again; strings meant for
// Lua are built in PluginCallView::scratch, which outlives the call.

namespace tahua {

namespace json = boost::json;

using namespace plugin_api_detail;

namespace {

constexpr const char* kCallMeta = "tahua.call";
constexpr std::size_t kMaxFieldsSet = 32;
constexpr std::size_t kMaxPath = 256;
constexpr std::size_t kMaxDenyMessage = 1024;
constexpr std::size_t kMaxLogBytes = 1024;

// Headers a plugin may not set: the framing, and the credentials the gateway manages.
bool reservedHeader(std::string_view name, bool response) {
  for (std::string_view r : {"content-length", "transfer-encoding", "connection", "host", "te", "upgrade", "keep-alive"})
    if (iequals(name, r)) return true;
  if (response) return iequals(name, "content-type");
  for (std::string_view r : {"authorization", "x-api-key", "api-key", "proxy-authorization", "cookie"})
    if (iequals(name, r)) return true;
  return false;
}

bool codeName(std::string_view code) {
  if (code.empty() || code.size() > 64) return false;
  for (char c : code)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// A dotted path's segments ("metadata.user" -> metadata, user). False if malformed.
}  // namespace

bool splitJsonPath(std::string_view path, std::vector<std::string_view>& out) {
  out.clear();
  if (path.empty() || path.size() > kMaxPath) return false;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string_view seg = path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (seg.empty() || out.size() == 8) return false;
    out.push_back(seg);
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool arrayIndex(std::string_view s, std::size_t& index) noexcept {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string_view::npos) return false;
  index = 0;
  for (char c : s) index = index * 10 + static_cast<std::size_t>(c - '0');
  return true;
}

const char* unwritablePath(const json::value* v, std::span<const std::string_view> segs) noexcept {
  for (std::size_t i = 0; v && i < segs.size(); ++i) {
    if (const auto* o = v->if_object()) {
      auto it = o->find(segs[i]);
      v = it == o->end() || it->value().is_null() ? nullptr : &it->value();  // made when missing
    } else if (const auto* a = v->if_array()) {
      std::size_t at = 0;
      if (!arrayIndex(segs[i], at)) return "an array is in the way: name its element by index (messages.0.content)";
      if (at >= a->size()) return "the index is past the array's end";
      v = &(*a)[at];
    } else {
      return "a string, number or boolean is in the way";
    }
  }
  return nullptr;
}

// The value at `path` (objects by key, arrays by index), or null.
const json::value* jsonAt(const json::value* v, std::string_view path) noexcept {
  try {
    std::vector<std::string_view> segs;
    if (!v || !splitJsonPath(path, segs)) return nullptr;
    for (std::string_view s : segs) {
      if (const auto* o = v->if_object()) {
        auto it = o->find(s);
        if (it == o->end()) return nullptr;
        v = &it->value();
      } else if (const auto* a = v->if_array()) {
        std::size_t i = 0;
        if (!arrayIndex(s, i) || i >= a->size()) return nullptr;
        v = &(*a)[i];
      } else {
        return nullptr;
      }
    }
    return v;
  } catch (...) {
    return nullptr;
  }
}

namespace {

struct Handle {
  PluginCallView* view;  // null once the call ended
};

PluginCallView& viewOf(lua_State* L) {
  auto* h = static_cast<Handle*>(luaL_checkudata(L, 1, kCallMeta));
  if (!h->view) luaL_error(L, "this object belongs to a call that has ended");
  return *h->view;
}

void requirePhase(lua_State* L, const PluginCallView& v, std::uint8_t phase, const char* what) {
  if (v.phase != phase) luaL_error(L, "%s is only available in %s", what, pluginPhaseFunction(phase));
}

int apiHeader(lua_State* L) {
  PluginCallView& v = viewOf(L);
  std::size_t n = 0;
  const char* name = luaL_checklstring(L, 2, &n);
  std::string_view value;
  bool found = false;
  if (v.phase == kPluginResponseHeaders && v.response_headers) {
    for (const auto& [k, val] : *v.response_headers)
      if (iequals(k, std::string_view(name, n))) {
        value = val;
        found = true;
        break;
      }
  } else if (v.ctx->headers) {
    value = v.ctx->headers->get(std::string_view(name, n));
    found = !value.empty();
  }
  if (!found) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushlstring(L, value.data(), value.size());
  return 1;
}

int apiSetHeader(lua_State* L) {
  PluginCallView& v = viewOf(L);
  if (v.phase != kPluginRequest && v.phase != kPluginResponseHeaders) return luaL_error(L, "set_header is not available here");
  std::size_t nn = 0, vn = 0;
  const char* name = luaL_checklstring(L, 2, &nn);
  const char* value = luaL_checklstring(L, 3, &vn);
  if (!tokenName({name, nn})) return luaL_error(L, "set_header: invalid header name");
  if (!headerValue({value, vn})) return luaL_error(L, "set_header: the value has CR, LF or NUL, or is over 4096 bytes");
  if (reservedHeader({name, nn}, v.phase == kPluginResponseHeaders)) return luaL_error(L, "set_header: %s is managed by the gateway", name);
  if (v.effects->set_headers.size() >= kMaxHeadersSet) return luaL_error(L, "set_header: at most 32 headers per call");
  if (!guarded([&] { v.effects->set_headers.emplace_back(std::string(name, nn), std::string(value, vn)); }))
    return luaL_error(L, "not enough memory");
  return 0;
}

int apiRemoveHeader(lua_State* L) {
  PluginCallView& v = viewOf(L);
  requirePhase(L, v, kPluginResponseHeaders, "remove_header");
  std::size_t nn = 0;
  const char* name = luaL_checklstring(L, 2, &nn);
  if (!tokenName({name, nn}) || reservedHeader({name, nn}, true)) return luaL_error(L, "remove_header: %s cannot be removed", name);
  if (v.effects->removed_headers.size() >= kMaxHeadersSet) return luaL_error(L, "remove_header: at most 32 headers per call");
  if (!guarded([&] { v.effects->removed_headers.emplace_back(name, nn); })) return luaL_error(L, "not enough memory");
  return 0;
}

int apiField(lua_State* L) {
  PluginCallView& v = viewOf(L);
  requirePhase(L, v, kPluginRequest, "field");
  std::size_t n = 0;
  const char* path = luaL_checklstring(L, 2, &n);
  const json::value* f = jsonAt(v.body->root(), std::string_view(path, n));
  if (!f || f->is_null()) {
    lua_pushnil(L);
  } else if (const auto* s = f->if_string()) {
    lua_pushlstring(L, s->data(), s->size());
  } else if (const auto* i = f->if_int64()) {
    lua_pushinteger(L, static_cast<lua_Integer>(*i));
  } else if (const auto* u = f->if_uint64()) {
    lua_pushnumber(L, static_cast<lua_Number>(*u));
  } else if (const auto* d = f->if_double()) {
    lua_pushnumber(L, *d);
  } else if (const auto* b = f->if_bool()) {
    lua_pushboolean(L, *b);
  } else if (guarded([&] { v.scratch() = json::serialize(*f); })) {
    lua_pushlstring(L, v.scratch().data(), v.scratch().size());
  } else {
    return luaL_error(L, "not enough memory");
  }
  return 1;
}

enum class Scalar { String, Integer, Number, Boolean, Nil };

bool recordField(PluginEffects& e, std::string_view path, Scalar kind, std::string_view s, lua_Integer i, lua_Number d, bool b) noexcept {
  try {
    std::unique_ptr<json::value> value;
    switch (kind) {
      case Scalar::String: value = std::make_unique<json::value>(json::string(s)); break;
      case Scalar::Integer: value = std::make_unique<json::value>(static_cast<std::int64_t>(i)); break;
      case Scalar::Number: value = std::make_unique<json::value>(d); break;
      case Scalar::Boolean: value = std::make_unique<json::value>(b); break;
      case Scalar::Nil: break;
    }
    e.set_fields.emplace_back(std::string(path), std::move(value));
    return true;
  } catch (...) {
    return false;
  }
}

bool validWritePath(std::string_view path) noexcept {
  try {
    std::vector<std::string_view> segs;
    if (!splitJsonPath(path, segs)) return false;
    return segs[0] != "model" && segs[0] != "stream";
  } catch (...) {
    return false;
  }
}

int apiSetField(lua_State* L) {
  PluginCallView& v = viewOf(L);
  requirePhase(L, v, kPluginRequest, "set_field");
  std::size_t n = 0;
  const char* path = luaL_checklstring(L, 2, &n);
  if (!validWritePath({path, n}))
    return luaL_error(L, "set_field: a dotted path of at most 8 names is expected, and `model` and `stream` cannot be changed");
  if (v.effects->set_fields.size() >= kMaxFieldsSet) return luaL_error(L, "set_field: at most 32 fields per call");
  // Checked against the body now, so a write that cannot happen is an error, not a no-op.
  {
    const char* why = nullptr;
    if (!guarded([&] {
          std::vector<std::string_view> segs;
          splitJsonPath({path, n}, segs);
          why = unwritablePath(v.body->root(), segs);
        }))
      return luaL_error(L, "not enough memory");
    if (why) return luaL_error(L, "set_field: %s: %s", path, why);
  }
  Scalar kind = Scalar::Nil;
  std::string_view s;
  lua_Integer i = 0;
  lua_Number d = 0;
  bool b = false;
  switch (lua_type(L, 3)) {
    case LUA_TSTRING: {
      std::size_t len = 0;
      const char* p = lua_tolstring(L, 3, &len);
      s = {p, len};
      kind = Scalar::String;
      break;
    }
    case LUA_TNUMBER:
      if (lua_isinteger(L, 3)) {
        i = lua_tointeger(L, 3);
        kind = Scalar::Integer;
      } else {
        d = lua_tonumber(L, 3);
        kind = Scalar::Number;
      }
      break;
    case LUA_TBOOLEAN:
      b = lua_toboolean(L, 3);
      kind = Scalar::Boolean;
      break;
    case LUA_TNIL:
    case LUA_TNONE: break;
    default: return luaL_error(L, "set_field takes a string, a number, a boolean or nil (to remove the field)");
  }
  if (!recordField(*v.effects, {path, n}, kind, s, i, d, b)) return luaL_error(L, "not enough memory");
  return 0;
}

int apiDeny(lua_State* L) {
  PluginCallView& v = viewOf(L);
  if (v.phase != kPluginRequest && v.phase != kPluginAuth) return luaL_error(L, "deny is only available in on_request and on_auth");
  const lua_Integer status = luaL_checkinteger(L, 2);
  std::size_t mn = 0, cn = 0;
  const char* message = luaL_checklstring(L, 3, &mn);
  const char* code = luaL_optlstring(L, 4, "", &cn);
  if (status < 400 || status > 499) return luaL_error(L, "deny: the status must be 400-499");
  if (mn == 0 || mn > kMaxDenyMessage) return luaL_error(L, "deny: the message must have 1 to 1024 bytes");
  if (cn != 0 && !codeName({code, cn})) return luaL_error(L, "deny: the code must be 1 to 64 of a-z, 0-9, _");
  PluginEffects& e = *v.effects;
  if (!guarded([&] {
        e.deny_message.assign(message, mn);
        e.deny_code.assign(code, cn);
        e.deny_status = static_cast<int>(status);
        e.denied = true;
      }))
    return luaL_error(L, "not enough memory");
  return 0;
}

// on_request: an upstream selection hint: the deployments of this version serve the
// request, as the client's X-Tahua-Version pin would (a version no deployment has falls
// back to the stable one, as a pin does).
int apiPinVersion(lua_State* L) {
  PluginCallView& v = viewOf(L);
  requirePhase(L, v, kPluginRequest, "pin_version");
  std::size_t n = 0;
  const char* version = luaL_checklstring(L, 2, &n);
  if (n == 0 || n > 64 || !tokenName({version, n})) return luaL_error(L, "pin_version: a version is 1 to 64 token characters");
  if (!guarded([&] { v.effects->pin_version.assign(version, n); })) return luaL_error(L, "not enough memory");
  return 0;
}

// on_auth: the request is the tenant's (and the key's, when named: one of the tenant's
// keys, whose models and limits then apply). Checked by the auth link after the call.
int apiAuthenticate(lua_State* L) {
  PluginCallView& v = viewOf(L);
  requirePhase(L, v, kPluginAuth, "authenticate");
  std::size_t tn = 0, kn = 0;
  const char* tenant = luaL_checklstring(L, 2, &tn);
  const char* key = luaL_optlstring(L, 3, "", &kn);
  if (tn == 0 || tn > 128 || kn > 128) return luaL_error(L, "authenticate: names of 1 to 128 bytes are expected");
  PluginEffects& e = *v.effects;
  if (!guarded([&] {
        e.auth_tenant.assign(tenant, tn);
        e.auth_key.assign(key, kn);
        e.authenticated = true;
      }))
    return luaL_error(L, "not enough memory");
  return 0;
}

void pushText(lua_State* L, std::string_view s) { lua_pushlstring(L, s.data(), s.size()); }

int callIndex(lua_State* L) {
  PluginCallView& v = viewOf(L);
  std::size_t n = 0;
  const char* key = luaL_checklstring(L, 2, &n);
  const std::string_view k(key, n);
  // Methods first (upvalue 1: the methods table).
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  const RequestContext& ctx = *v.ctx;
  if (k == "id") {
    pushText(L, ctx.request_id);
  } else if (k == "method") {
    pushText(L, ctx.method);
  } else if (k == "path") {
    pushText(L, ctx.path);
  } else if (k == "api") {
    pushText(L, apiName(ctx.endpoint));
  } else if (k == "model") {
    if (ctx.model) pushText(L, ctx.model->name);
    else lua_pushnil(L);
  } else if (k == "tenant") {
    if (ctx.principal.tenant) pushText(L, ctx.principal.tenant->name);
    else lua_pushnil(L);
  } else if (k == "key") {
    if (ctx.principal.key) pushText(L, ctx.principal.key->name);
    else lua_pushnil(L);
  } else if (k == "stream") {
    lua_pushboolean(L, ctx.facts.stream);
  } else if (k == "status") {
    if (v.phase == kPluginResponseHeaders) lua_pushinteger(L, ctx.status ? ctx.status : ctx.error ? ctx.error->httpStatus() : 200);
    else lua_pushnil(L);
  } else {
    lua_pushnil(L);
  }
  return 1;
}

int apiLog(lua_State* L) {
  auto* rt = static_cast<PluginRuntime*>(lua_touserdata(L, lua_upvalueindex(1)));
  std::size_t n = 0;
  const char* msg = luaL_checklstring(L, 1, &n);
  if (rt->call) rt->instance.log(*rt->call, std::string_view(msg, std::min(n, kMaxLogBytes)));
  return 0;
}

// Recorded with the call (it may run off the worker's thread); finish() adds them to
// the worker's metrics.
bool recordCount(PluginCallView& call, std::string_view name, std::int64_t by) noexcept {
  for (auto& [k, n] : call.counts)
    if (k == name) {
      n += by;
      return true;
    }
  return call.counts.size() >= kMaxPluginCounters || guarded([&] { call.counts.emplace_back(std::string(name), by); });
}

int apiCount(lua_State* L) {
  PluginCallView& call = runningCall(L, "tahua.count");
  std::size_t n = 0;
  const char* name = luaL_checklstring(L, 1, &n);
  const lua_Integer by = luaL_optinteger(L, 2, 1);
  if (!codeName({name, n})) return luaL_error(L, "tahua.count: the name must be 1 to 64 of a-z, 0-9, _");
  if (by < 0) return luaL_error(L, "tahua.count: counters only go up");
  if (!recordCount(call, {name, n}, by)) return luaL_error(L, "not enough memory");
  return 0;
}

int apiNow(lua_State* L) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  lua_pushnumber(L, std::chrono::duration<double>(now).count());
  return 1;
}

// The call object's metatable and the `tahua` table, in a fresh state.
}  // namespace

void installPluginApi(lua_State* L, PluginRuntime* rt) {
  luaL_newmetatable(L, kCallMeta);
  lua_createtable(L, 0, 8);
  const luaL_Reg methods[] = {{"header", apiHeader}, {"set_header", apiSetHeader}, {"remove_header", apiRemoveHeader},
                              {"field", apiField},   {"set_field", apiSetField},   {"deny", apiDeny},
                              {"authenticate", apiAuthenticate}, {"pin_version", apiPinVersion}};
  for (const auto& m : methods) {
    lua_pushcfunction(L, m.func);
    lua_setfield(L, -2, m.name);
  }
  lua_pushcclosure(L, callIndex, 1);
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "tahua.call");
  lua_setfield(L, -2, "__metatable");  // getmetatable() shows a name, setmetatable() is refused
  lua_pop(L, 1);
  lua_createtable(L, 0, 3);
  const luaL_Reg fns[] = {{"log", apiLog}, {"count", apiCount}};
  for (const auto& f : fns) {
    lua_pushlightuserdata(L, rt);
    lua_pushcclosure(L, f.func, 1);
    lua_setfield(L, -2, f.name);
  }
  lua_pushcfunction(L, apiNow);
  lua_setfield(L, -2, "now");
  installOutboundApi(L, rt);  // kv and http (plugin_outbound_api.cpp)
  lua_setglobal(L, "tahua");
}


void pushCallObject(lua_State* thread, PluginCallView& view, int& handle_ref) {
  auto* h = static_cast<Handle*>(lua_newuserdatauv(thread, sizeof(Handle), 0));
  h->view = &view;
  luaL_setmetatable(thread, kCallMeta);
  lua_pushvalue(thread, -1);
  handle_ref = luaL_ref(thread, LUA_REGISTRYINDEX);
}

void endCallObject(lua_State* L, int handle_ref) {
  if (handle_ref == LUA_NOREF) return;
  lua_rawgeti(L, LUA_REGISTRYINDEX, handle_ref);
  if (auto* h = static_cast<Handle*>(lua_touserdata(L, -1))) h->view = nullptr;
  lua_pop(L, 1);
  luaL_unref(L, LUA_REGISTRYINDEX, handle_ref);
}

}  // namespace tahua
