#include "plugins/plugin_host.h"

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <lua.hpp>

#include "core/log.h"
#include "plugins/plugin_code.h"
#include "request/request_context.h"

// Lua raises errors with longjmp: the API functions below hold no C++ object with a
// destructor while they call the Lua API. C++ work that allocates happens in helpers
// that catch everything and return before Lua is called again; strings meant for Lua
// are built in PluginCallView::scratch, which outlives the call.

namespace tahua {

namespace json = boost::json;

namespace {

constexpr const char* kCallMeta = "tahua.call";
constexpr std::size_t kMaxHeaderName = 64;
constexpr std::size_t kMaxHeaderValue = 4096;
constexpr std::size_t kMaxHeadersSet = 32;
constexpr std::size_t kMaxFieldsSet = 32;
constexpr std::size_t kMaxPath = 256;
constexpr std::size_t kMaxDenyMessage = 1024;
constexpr int kMaxLogLines = 16;
constexpr std::size_t kMaxLogBytes = 1024;
constexpr std::size_t kMaxCounters = 32;
constexpr std::chrono::seconds kRebuildPause{1};

int phaseIndex(std::uint8_t phase) {
  switch (phase) {
    case kPluginRequest: return 0;
    case kPluginResponseHeaders: return 1;
    case kPluginStreamEvent: return 2;
    default: return 3;
  }
}

std::string_view phaseName(std::uint8_t phase) {
  switch (phase) {
    case kPluginRequest: return "request";
    case kPluginResponseHeaders: return "response_headers";
    case kPluginStreamEvent: return "stream_event";
    default: return "complete";
  }
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

bool tokenName(std::string_view name) {
  if (name.empty() || name.size() > kMaxHeaderName) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return false;
  return true;
}

bool headerValue(std::string_view v) {
  if (v.size() > kMaxHeaderValue) return false;
  for (char c : v)
    if (c == '\r' || c == '\n' || c == '\0') return false;
  return true;
}

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
bool splitPath(std::string_view path, std::vector<std::string_view>& out) {
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

// The value at `path` (objects by key, arrays by index), or null.
const json::value* lookup(const json::value* v, std::string_view path) noexcept {
  try {
    std::vector<std::string_view> segs;
    if (!v || !splitPath(path, segs)) return nullptr;
    for (std::string_view s : segs) {
      if (const auto* o = v->if_object()) {
        auto it = o->find(s);
        if (it == o->end()) return nullptr;
        v = &it->value();
      } else if (const auto* a = v->if_array()) {
        std::size_t i = 0;
        if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string_view::npos) return nullptr;
        i = std::stoul(std::string(s));
        if (i >= a->size()) return nullptr;
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

struct Handle {
  PluginCallView* view;  // null once the call ended
  PluginInstance* instance;
};

PluginCallView& viewOf(lua_State* L) {
  auto* h = static_cast<Handle*>(luaL_checkudata(L, 1, kCallMeta));
  if (!h->view) luaL_error(L, "this object belongs to a call that has ended");
  return *h->view;
}

void requirePhase(lua_State* L, const PluginCallView& v, std::uint8_t phase, const char* what) {
  if (v.phase != phase) luaL_error(L, "%s is only available in %s", what, phase == kPluginRequest ? "on_request" : "on_response_headers");
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

bool recordHeader(PluginEffects& e, std::string_view name, std::string_view value) noexcept {
  try {
    e.set_headers.emplace_back(std::string(name), std::string(value));
    return true;
  } catch (...) {
    return false;
  }
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
  if (!recordHeader(*v.effects, {name, nn}, {value, vn})) return luaL_error(L, "not enough memory");
  return 0;
}

bool recordRemoval(PluginEffects& e, std::string_view name) noexcept {
  try {
    e.removed_headers.emplace_back(name);
    return true;
  } catch (...) {
    return false;
  }
}

int apiRemoveHeader(lua_State* L) {
  PluginCallView& v = viewOf(L);
  requirePhase(L, v, kPluginResponseHeaders, "remove_header");
  std::size_t nn = 0;
  const char* name = luaL_checklstring(L, 2, &nn);
  if (!tokenName({name, nn}) || reservedHeader({name, nn}, true)) return luaL_error(L, "remove_header: %s cannot be removed", name);
  if (v.effects->removed_headers.size() >= kMaxHeadersSet) return luaL_error(L, "remove_header: at most 32 headers per call");
  if (!recordRemoval(*v.effects, {name, nn})) return luaL_error(L, "not enough memory");
  return 0;
}

// Serializes a JSON object or array into `out`.
bool jsonText(const json::value& v, std::string& out) noexcept {
  try {
    out = json::serialize(v);
    return true;
  } catch (...) {
    return false;
  }
}

int apiField(lua_State* L) {
  PluginCallView& v = viewOf(L);
  requirePhase(L, v, kPluginRequest, "field");
  std::size_t n = 0;
  const char* path = luaL_checklstring(L, 2, &n);
  const json::value* f = lookup(v.body->root(), std::string_view(path, n));
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
  } else if (jsonText(*f, v.scratch())) {
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
    if (!splitPath(path, segs)) return false;
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

bool recordDenial(PluginEffects& e, int status, std::string_view message, std::string_view code) noexcept {
  try {
    e.denied = true;
    e.deny_status = status;
    e.deny_message.assign(message);
    e.deny_code.assign(code);
    return true;
  } catch (...) {
    return false;
  }
}

int apiDeny(lua_State* L) {
  PluginCallView& v = viewOf(L);
  requirePhase(L, v, kPluginRequest, "deny");
  const lua_Integer status = luaL_checkinteger(L, 2);
  std::size_t mn = 0, cn = 0;
  const char* message = luaL_checklstring(L, 3, &mn);
  const char* code = luaL_optlstring(L, 4, "", &cn);
  if (status < 400 || status > 499) return luaL_error(L, "deny: the status must be 400-499");
  if (mn == 0 || mn > kMaxDenyMessage) return luaL_error(L, "deny: the message must have 1 to 1024 bytes");
  if (cn != 0 && !codeName({code, cn})) return luaL_error(L, "deny: the code must be 1 to 64 of a-z, 0-9, _");
  if (!recordDenial(*v.effects, static_cast<int>(status), {message, mn}, {code, cn})) return luaL_error(L, "not enough memory");
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
  rt->instance.log(*rt, std::string_view(msg, std::min(n, kMaxLogBytes)));
  return 0;
}

// Recorded on the runtime (the call may run off the worker's thread); finish() adds them
// to the worker's metrics.
bool recordCount(PluginRuntime& rt, std::string_view name, std::int64_t by) noexcept {
  try {
    for (auto& [k, n] : rt.counts)
      if (k == name) {
        n += by;
        return true;
      }
    if (rt.counts.size() < kMaxCounters) rt.counts.emplace_back(std::string(name), by);
    return true;
  } catch (...) {
    return false;
  }
}

int apiCount(lua_State* L) {
  auto* rt = static_cast<PluginRuntime*>(lua_touserdata(L, lua_upvalueindex(1)));
  std::size_t n = 0;
  const char* name = luaL_checklstring(L, 1, &n);
  const lua_Integer by = luaL_optinteger(L, 2, 1);
  if (!codeName({name, n})) return luaL_error(L, "tahua.count: the name must be 1 to 64 of a-z, 0-9, _");
  if (by < 0) return luaL_error(L, "tahua.count: counters only go up");
  if (!recordCount(*rt, {name, n}, by)) return luaL_error(L, "not enough memory");
  return 0;
}

int apiNow(lua_State* L) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  lua_pushnumber(L, std::chrono::duration<double>(now).count());
  return 1;
}

// The call object's metatable and the `tahua` table, in a fresh state.
void installApi(lua_State* L, PluginRuntime* rt) {
  luaL_newmetatable(L, kCallMeta);
  lua_createtable(L, 0, 6);
  const luaL_Reg methods[] = {{"header", apiHeader}, {"set_header", apiSetHeader}, {"remove_header", apiRemoveHeader},
                              {"field", apiField},   {"set_field", apiSetField},   {"deny", apiDeny}};
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
  lua_setglobal(L, "tahua");
}

}  // namespace

// --- effects and body

PluginEffects::PluginEffects() = default;
PluginEffects::~PluginEffects() = default;

void PluginEffects::clear() {
  set_headers.clear();
  removed_headers.clear();
  set_fields.clear();
  denied = false;
  deny_status = 403;
  deny_message.clear();
  deny_code.clear();
  log_lines = 0;
}

PluginBody::PluginBody() = default;

void PluginBody::reset(const std::string& text) {
  text_ = &text;
  json_.reset();
  parsed_ = false;
}
PluginBody::~PluginBody() = default;

const json::value* PluginBody::root() {
  if (!parsed_) {
    parsed_ = true;
    try {
      boost::system::error_code ec;
      json::value v = text_ ? json::parse(*text_, ec) : json::value();
      if (!ec && v.is_object()) json_ = std::make_unique<json::value>(std::move(v));
    } catch (...) {
      json_.reset();
    }
  }
  return json_.get();
}

const json::value* PluginBody::find(std::string_view path) { return lookup(root(), path); }

bool PluginBody::apply(PluginEffects& effects) {
  if (effects.set_fields.empty() || !root()) return false;
  bool changed = false;
  try {
    std::vector<std::string_view> segs;
    for (auto& [path, value] : effects.set_fields) {
      if (!splitPath(path, segs)) continue;
      json::object* o = &json_->as_object();
      bool ok = true;
      for (std::size_t i = 0; ok && i + 1 < segs.size(); ++i) {
        json::value& next = (*o)[segs[i]];
        if (next.is_null()) next = json::object();
        if (!next.is_object()) ok = false;  // a string or array in the way: left alone
        else o = &next.as_object();
      }
      if (!ok) continue;
      if (value) (*o)[segs.back()] = *value;
      else o->erase(segs.back());
      changed = true;
    }
  } catch (...) {
    return changed;
  }
  return changed;
}

std::string PluginBody::serialize() const { return json_ ? json::serialize(*json_) : text_ ? *text_ : std::string(); }

std::string_view pluginOutcomeName(PluginOutcome o) {
  switch (o) {
    case PluginOutcome::Ok: return "ok";
    case PluginOutcome::Error: return "error";
    case PluginOutcome::Cpu: return "cpu_budget";
    case PluginOutcome::Memory: return "memory_budget";
    case PluginOutcome::Slice: return "slice";
    case PluginOutcome::BreakerOpen: return "breaker_open";
  }
  return "error";
}

// --- the instance

PluginInstance::PluginInstance(const PluginConfig& config, WorkerMetrics& metrics) : config_(config), metrics_(metrics) {
  for (std::uint8_t bit : kPluginPhaseBits) {
    if (!(config.phases & bit)) continue;
    for (std::size_t o = 0; o < kPluginOutcomes; ++o)
      calls_[phaseIndex(bit)][o] = &metrics.plugin_calls[{config.id, std::string(phaseName(bit)),
                                                          std::string(pluginOutcomeName(static_cast<PluginOutcome>(o)))}];
  }
  seconds_ = &metrics.plugin_call_seconds[config.id];
}

PluginInstance::~PluginInstance() = default;

std::uint64_t& PluginInstance::calls(std::uint8_t phase, PluginOutcome outcome) {
  return *calls_[phaseIndex(phase)][static_cast<std::size_t>(outcome)];
}

std::shared_ptr<PluginRuntime> PluginInstance::runtime() {
  for (auto it = runtimes_.begin(); it != runtimes_.end();) {
    if ((*it)->busy) {  // another thread runs a call on it: not even its state is read
      ++it;
    } else if ((*it)->vm.broken()) {
      it = runtimes_.erase(it);  // calls still running on it keep it until they end
    } else {
      return *it;
    }
  }
  if (runtimes_.size() >= kMaxRuntimes) {
    log::warn("plugin has no free runtime: every one runs a long call", {{"plugin", config_.id}});
    return nullptr;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now < next_build_) return nullptr;
  auto rt = std::make_shared<PluginRuntime>(LuaBudgets{config_.memory_bytes, config_.cpu, config_.slice}, *this);
  installApi(rt->vm.state(), rt.get());
  std::string error;
  if (!rt->vm.load(*config_.bytecode, config_.id, error)) {
    next_build_ = now + kRebuildPause;
    log::error("plugin could not be instantiated", {{"plugin", config_.id}, {"version", config_.version}, {"error", error}});
    return nullptr;
  }
  for (std::uint8_t bit : kPluginPhaseBits)
    if (config_.phases & bit) rt->functions[phaseIndex(bit)] = rt->vm.function(pluginPhaseFunction(bit));
  runtimes_.push_back(rt);
  return rt;
}

lua_State* PluginInstance::prepare(PluginRuntime& rt, LuaCall& call, std::uint8_t phase) {
  rt.log_left = kMaxLogLines;
  rt.counts.clear();
  return rt.vm.prepare(call, rt.functions[phaseIndex(phase)]);
}

void PluginInstance::pushView(PluginRuntime& rt, lua_State* thread, PluginCallView& view, int& handle_ref) {
  auto* h = static_cast<Handle*>(lua_newuserdatauv(thread, sizeof(Handle), 0));
  h->view = &view;
  h->instance = this;
  luaL_setmetatable(thread, kCallMeta);
  lua_pushvalue(thread, -1);
  handle_ref = luaL_ref(thread, LUA_REGISTRYINDEX);  // kept to clear it in finish()
}

void PluginInstance::pushEvent(lua_State* t, std::string_view event, std::string_view data, std::uint32_t index) {
  lua_createtable(t, 0, 3);
  if (!event.empty()) {
    lua_pushlstring(t, event.data(), event.size());
    lua_setfield(t, -2, "event");
  }
  lua_pushlstring(t, data.data(), data.size());
  lua_setfield(t, -2, "data");
  lua_pushinteger(t, index);
  lua_setfield(t, -2, "index");
}

void PluginInstance::pushCompletion(lua_State* t, const RequestContext& ctx) {
  lua_createtable(t, 0, 10);
  auto str = [&](const char* k, std::string_view v) {
    lua_pushlstring(t, v.data(), v.size());
    lua_setfield(t, -2, k);
  };
  auto num = [&](const char* k, lua_Integer v) {
    lua_pushinteger(t, v);
    lua_setfield(t, -2, k);
  };
  str("id", ctx.request_id);
  if (ctx.model) str("model", ctx.model->name);
  if (ctx.principal.tenant) str("tenant", ctx.principal.tenant->name);
  if (ctx.principal.key) str("key", ctx.principal.key->name);
  num("status", ctx.error ? ctx.error->httpStatus() : ctx.status);
  if (ctx.error) str("error", ctx.error->code());
  if (ctx.usage.prompt_tokens >= 0) num("prompt_tokens", ctx.usage.prompt_tokens);
  if (ctx.usage.completion_tokens >= 0) num("completion_tokens", ctx.usage.completion_tokens);
  const auto end = ctx.end == SteadyTime{} ? std::chrono::steady_clock::now() : ctx.end;
  num("duration_ms", std::chrono::duration_cast<std::chrono::milliseconds>(end - ctx.start).count());
  lua_pushboolean(t, ctx.streaming);
  lua_setfield(t, -2, "stream");
}

bool PluginInstance::readEventResult(const LuaCall& call, EventVerdict& verdict, std::vector<std::pair<std::string, std::string>>& events) {
  events.clear();
  verdict = EventVerdict::Keep;
  if (call.results == 0) return true;
  lua_State* t = call.thread;
  const int at = lua_gettop(t) - call.results + 1;  // the first result
  auto text = [&](int index, std::string& out) {
    std::size_t n = 0;
    const char* p = lua_tolstring(t, index, &n);  // strings only (lua_type checked): no conversion
    out.assign(p, n);
  };
  switch (lua_type(t, at)) {
    case LUA_TNIL: return true;
    case LUA_TBOOLEAN:
      verdict = lua_toboolean(t, at) ? EventVerdict::Keep : EventVerdict::Drop;
      return true;
    case LUA_TSTRING:
      verdict = EventVerdict::Replace;
      events.emplace_back();
      text(at, events.back().second);
      return true;
    case LUA_TTABLE: break;
    default: return false;
  }
  verdict = EventVerdict::Replace;
  const auto n = lua_rawlen(t, at);
  if (n > 16 || !lua_checkstack(t, 2)) return false;
  for (lua_Unsigned i = 1; i <= n; ++i) {
    events.emplace_back();
    auto& [event, data] = events.back();
    const int type = lua_rawgeti(t, at, static_cast<lua_Integer>(i));
    bool ok = true;
    if (type == LUA_TSTRING) {
      text(-1, data);
    } else if (type == LUA_TTABLE) {
      lua_pushliteral(t, "data");
      ok = lua_rawget(t, -2) == LUA_TSTRING;
      if (ok) text(-1, data);
      lua_pop(t, 1);
      lua_pushliteral(t, "event");
      const int et = lua_rawget(t, -2);
      if (et == LUA_TSTRING) text(-1, event);
      else ok = ok && et == LUA_TNIL;
      lua_pop(t, 1);
    } else {
      ok = false;
    }
    lua_pop(t, 1);
    if (!ok || event.find_first_of("\r\n") != std::string::npos || data.find('\r') != std::string::npos) return false;
  }
  return true;
}

LuaStep PluginInstance::run(PluginRuntime& rt, LuaCall& call, RequestContext& ctx) {
  rt.current = &ctx;
  const int nargs = lua_gettop(call.thread) - 1;
  const LuaStep s = rt.vm.run(call, nargs);
  rt.current = nullptr;
  return s;
}

LuaStep PluginInstance::runToEnd(PluginRuntime& rt, LuaCall& call, const RequestContext& ctx,
                                 std::chrono::steady_clock::time_point deadline) {
  rt.current = &ctx;
  const LuaStep s = rt.vm.runToEnd(call, deadline);
  rt.current = nullptr;
  return s;
}

PluginOutcome PluginInstance::finish(PluginRuntime& rt, LuaCall& call, std::uint8_t phase, const RequestContext& ctx, int handle_ref) {
  if (handle_ref != LUA_NOREF) {
    lua_State* L = rt.vm.state();
    lua_rawgeti(L, LUA_REGISTRYINDEX, handle_ref);
    if (auto* h = static_cast<Handle*>(lua_touserdata(L, -1))) h->view = nullptr;
    lua_pop(L, 1);
    luaL_unref(L, LUA_REGISTRYINDEX, handle_ref);
  }
  PluginOutcome outcome = PluginOutcome::Ok;
  switch (call.failure) {
    case LuaFailure::None: outcome = call.thread && lua_status(call.thread) == LUA_YIELD ? PluginOutcome::Slice : PluginOutcome::Ok; break;
    case LuaFailure::Error: outcome = PluginOutcome::Error; break;
    case LuaFailure::Cpu: outcome = PluginOutcome::Cpu; break;
    case LuaFailure::Memory: outcome = PluginOutcome::Memory; break;
    case LuaFailure::Slice: outcome = PluginOutcome::Slice; break;
  }
  ++calls(phase, outcome);
  seconds_->observe(std::chrono::duration<double>(call.used).count());
  for (const auto& [name, n] : rt.counts) count(name, n);
  rt.counts.clear();
  if (outcome == PluginOutcome::Ok) {
    failures_in_row_ = 0;
    return outcome;
  }
  const auto now = std::chrono::steady_clock::now();
  if (++failures_in_row_ >= config_.breaker_failures) {
    open_until_ = now + config_.breaker_cooldown;
    failures_in_row_ = 0;
  }
  log::warn("plugin call failed", {{"plugin", config_.id},
                                   {"version", config_.version},
                                   {"phase", phaseName(phase)},
                                   {"request_id", ctx.request_id},
                                   {"outcome", pluginOutcomeName(outcome)},
                                   {"error", call.message},
                                   {"cpu_ms", std::chrono::duration<double, std::milli>(call.used).count()},
                                   {"breaker_open", now < open_until_}});
  return outcome;
}

void PluginInstance::countSkipped(std::uint8_t phase) { ++calls(phase, PluginOutcome::BreakerOpen); }

void PluginInstance::log(PluginRuntime& rt, std::string_view message) noexcept {
  if (rt.log_left <= 0) return;  // a plugin logging in a loop: the first lines of each call only
  --rt.log_left;
  try {
    log::info("plugin log", {{"plugin", config_.id},
                             {"request_id", rt.current ? std::string_view(rt.current->request_id) : std::string_view()},
                             {"message", message}});
  } catch (...) {
  }
}

void PluginInstance::count(std::string_view name, std::int64_t n) noexcept {
  for (auto& [k, counter] : counters_)
    if (k == name) {
      *counter += static_cast<std::uint64_t>(n);
      return;
    }
  if (counters_.size() >= kMaxCounters) return;  // bounded series per plugin: the rest is dropped
  try {
    std::uint64_t* counter = &metrics_.plugin_counters[{config_.id, std::string(name)}];
    counters_.emplace_back(std::string(name), counter);
    *counter += static_cast<std::uint64_t>(n);
  } catch (...) {
  }
}

}  // namespace tahua
