#include "plugins/lua_sandbox.h"

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <lua.hpp>
#include <new>
#include <tuple>

#include "plugins/lua_patterns.h"

// Lua raises errors with longjmp: functions registered here hold no C++ object with a
// destructor while they call the Lua API.

namespace tahua {
namespace {
// "=name": the chunk's name as Lua shows it in errors. (Built by append: GCC 12 warns,
// wrongly, about "=" + std::string.)
std::string chunkName(std::string_view name) {
  std::string out;
  out.reserve(name.size() + 1);
  out.push_back('=');
  out.append(name);
  return out;
}
}  // namespace

namespace {

constexpr lua_Integer kMaxMove = 1 << 16;  // table.move's range (a plain table that large exceeds 1 MiB anyway)
constexpr std::size_t kMaxErrorText = 512;
constexpr std::size_t kIdleThreads = 8;

// Calls upvalue 1 (the library's own function) with this call's arguments.
int callOriginal(lua_State* L, int nresults) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, nresults);
  return lua_gettop(L);
}

// setmetatable without __gc: a finalizer runs when the collector decides, with hooks
// off, so no budget could stop it.
int safeSetmetatable(lua_State* L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    const bool gc = lua_rawget(L, 2) != LUA_TNIL;
    lua_pop(L, 1);
    if (gc) return luaL_error(L, "__gc metamethods are not allowed in plugins");
  }
  return callOriginal(L, 1);
}

// string.rep of nothing loops n times in C (memcpy of 0 bytes): answered here.
int safeRep(lua_State* L) {
  std::size_t len = 0, sep = 0;
  luaL_checklstring(L, 1, &len);
  const lua_Integer n = luaL_checkinteger(L, 2);
  luaL_optlstring(L, 3, "", &sep);
  if (n <= 0 || len + sep == 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  return callOriginal(L, 1);
}

// The table library over plain tables only: with __index or __len, its C loops can run
// for as long as a metamethod keeps answering, out of the hook's reach. Upvalue 2: the
// argument positions that are tables (bit i: argument i); upvalue 3: true for move.
int plainTables(lua_State* L) {
  const lua_Integer args = lua_tointeger(L, lua_upvalueindex(2));
  for (int i = 1; i <= 5; ++i) {
    if (!(args >> i & 1) || lua_type(L, i) != LUA_TTABLE || !lua_getmetatable(L, i)) continue;
    lua_pop(L, 1);
    return luaL_error(L, "table functions take tables without a metatable in plugins");
  }
  if (lua_toboolean(L, lua_upvalueindex(3))) {
    const lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
    if (e >= f && static_cast<__int128>(e) - f >= kMaxMove) return luaL_error(L, "table.move: at most %d elements in plugins", static_cast<int>(kMaxMove));
  }
  return callOriginal(L, LUA_MULTRET);
}

void wrap(lua_State* L, const char* lib, const char* name, lua_CFunction fn, lua_Integer args = 0, bool move = false) {
  lua_getglobal(L, lib);
  lua_getfield(L, -1, name);
  if (fn == plainTables) {
    lua_pushinteger(L, args);
    lua_pushboolean(L, move);
    lua_pushcclosure(L, fn, 3);
  } else {
    lua_pushcclosure(L, fn, 1);
  }
  lua_setfield(L, -2, name);
  lua_pop(L, 1);
}

void openSandbox(lua_State* L) {
  const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},      {LUA_STRLIBNAME, luaopen_string}, {LUA_TABLIBNAME, luaopen_table},
                           {LUA_MATHLIBNAME, luaopen_math}, {LUA_UTF8LIBNAME, luaopen_utf8},  {LUA_OSLIBNAME, luaopen_os}};
  for (const auto& lib : libs) {
    luaL_requiref(L, lib.name, lib.func, 1);
    lua_pop(L, 1);
  }
  for (const char* name : {"dofile", "loadfile", "load", "collectgarbage", "print", "require"}) {
    lua_pushnil(L);
    lua_setglobal(L, name);
  }
  lua_getglobal(L, LUA_STRLIBNAME);
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_pop(L, 1);
  // os: the clock and the calendar only.
  lua_getglobal(L, LUA_OSLIBNAME);
  lua_createtable(L, 0, 4);
  for (const char* name : {"time", "clock", "date", "difftime"}) {
    lua_getfield(L, -2, name);
    lua_setfield(L, -2, name);
  }
  lua_setglobal(L, LUA_OSLIBNAME);
  lua_pop(L, 1);
  lua_getglobal(L, LUA_GNAME);
  lua_getfield(L, -1, "setmetatable");
  lua_pushcclosure(L, safeSetmetatable, 1);
  lua_setfield(L, -2, "setmetatable");
  lua_pop(L, 1);
  wrap(L, LUA_STRLIBNAME, "rep", safeRep);
  for (const char* name : {"insert", "remove", "concat", "sort", "unpack"}) wrap(L, LUA_TABLIBNAME, name, plainTables, 1 << 1);
  wrap(L, LUA_TABLIBNAME, "move", plainTables, (1 << 1) | (1 << 5), true);
  installLinearPatterns(L);
}

std::string errorText(lua_State* t) {
  if (lua_type(t, -1) == LUA_TSTRING) {
    std::size_t n = 0;
    const char* s = lua_tolstring(t, -1, &n);
    return std::string(s, std::min(n, kMaxErrorText));
  }
  return std::string("a ") + luaL_typename(t, -1) + " value was raised as an error";
}

int appendChunk(lua_State*, const void* p, std::size_t size, void* out) {
  static_cast<std::string*>(out)->append(static_cast<const char*>(p), size);
  return 0;
}

}  // namespace

std::string_view luaFailureName(LuaFailure f) {
  switch (f) {
    case LuaFailure::None: return "none";
    case LuaFailure::Error: return "error";
    case LuaFailure::Cpu: return "cpu_budget";
    case LuaFailure::Memory: return "memory_budget";
    case LuaFailure::Slice: return "slice";
  }
  return "error";
}

bool LuaVm::compile(std::string_view source, std::string_view name, std::string& bytecode, std::string& error) {
  lua_State* L = luaL_newstate();
  if (!L) {
    error = "out of memory";
    return false;
  }
  const std::string chunk = chunkName(name);
  if (luaL_loadbufferx(L, source.data(), source.size(), chunk.c_str(), "t") != LUA_OK) {
    const char* msg = lua_tostring(L, -1);
    error = msg ? msg : "cannot compile";
    lua_close(L);
    return false;
  }
  bytecode.clear();
  lua_dump(L, appendChunk, &bytecode, 0);
  lua_close(L);
  return true;
}

LuaVm::LuaVm(const LuaBudgets& budgets) : budgets_(budgets) {
  L_ = lua_newstate(&LuaVm::allocate, this);
  if (!L_) throw std::bad_alloc();
  *static_cast<LuaVm**>(lua_getextraspace(L_)) = this;  // threads copy it: the hook finds us
  openSandbox(L_);
  lua_sethook(L_, &LuaVm::hook, LUA_MASKCOUNT, kHookInstructions);  // threads inherit it
}

LuaVm::~LuaVm() {
  if (L_) lua_close(L_);
}

void* LuaVm::allocate(void* ud, void* ptr, std::size_t osize, std::size_t nsize) {
  auto* vm = static_cast<LuaVm*>(ud);
  const std::size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    std::free(ptr);
    vm->used_ -= old;
    return nullptr;
  }
  // Only while plugin code runs: the host's own pushes (a thread, a call's arguments)
  // happen outside protected mode, where a refusal would abort the process.
  if (nsize > old && vm->enforce_ && vm->used_ - old + nsize > vm->budgets_.memory_bytes) {
    vm->memory_refused_ = true;
    return nullptr;
  }
  void* p = std::realloc(ptr, nsize);
  if (!p) return nullptr;
  vm->used_ = vm->used_ - old + nsize;
  return p;
}

void LuaVm::hook(lua_State* L, lua_Debug*) {
  LuaVm* vm = *static_cast<LuaVm**>(lua_getextraspace(L));
  if (vm->over_ == LuaFailure::None) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= vm->cpu_end_) {
      vm->over_ = LuaFailure::Cpu;
    } else if (now >= vm->slice_end_) {
      if (lua_isyieldable(L)) {
        lua_yield(L, 0);  // the slice is over: resumed later (pcall cannot catch a yield)
        return;
      }
      vm->over_ = LuaFailure::Slice;
    }
    if (vm->over_ == LuaFailure::None) return;
  }
  if (lua_isyieldable(L)) {
    lua_yield(L, 0);  // the caller abandons the call
    return;
  }
  // Inside a C function's callback: raise, and keep raising at every instruction until
  // the code is back where it can yield.
  lua_sethook(L, &LuaVm::hook, LUA_MASKCOUNT, 1);
  luaL_error(L, vm->over_ == LuaFailure::Cpu ? "plugin CPU budget exceeded" : "plugin ran past its time slice inside a callback");
}

bool LuaVm::load(std::string_view bytecode, std::string_view name, std::string& error) {
  const std::string chunk = chunkName(name);
  if (luaL_loadbufferx(L_, bytecode.data(), bytecode.size(), chunk.c_str(), "b") != LUA_OK) {
    error = errorText(L_);
    lua_pop(L_, 1);
    return false;
  }
  LuaCall call;
  call.thread = lua_newthread(L_);
  call.thread_ref = luaL_ref(L_, LUA_REGISTRYINDEX);
  lua_xmove(L_, call.thread, 1);
  LuaStep s = step(call, 0);
  while (s == LuaStep::Yielded) s = step(call, 0);  // the top level runs at once, within the budgets
  if (s == LuaStep::Failed) {
    error = call.failure == LuaFailure::Error ? call.message : "top level: " + std::string(luaFailureName(call.failure));
    release(call);
    return false;
  }
  if (call.results < 1 || !lua_istable(call.thread, -call.results)) {
    error = "the plugin's code must end with `return` and a table of phase functions";
    release(call);
    return false;
  }
  lua_pushvalue(call.thread, -call.results);
  table_ref_ = luaL_ref(call.thread, LUA_REGISTRYINDEX);
  release(call);
  return true;
}

int LuaVm::function(const char* name) const {
  lua_rawgeti(L_, LUA_REGISTRYINDEX, table_ref_);
  lua_pushstring(L_, name);
  lua_rawget(L_, -2);
  if (!lua_isfunction(L_, -1)) {
    lua_pop(L_, 2);
    return LUA_NOREF;
  }
  const int ref = luaL_ref(L_, LUA_REGISTRYINDEX);
  lua_pop(L_, 1);
  return ref;
}

lua_State* LuaVm::prepare(LuaCall& call, int fn) {
  call = LuaCall{};
  if (!idle_threads_.empty()) {
    std::tie(call.thread, call.thread_ref) = idle_threads_.back();
    idle_threads_.pop_back();
  } else {
    call.thread = lua_newthread(L_);
    call.thread_ref = luaL_ref(L_, LUA_REGISTRYINDEX);
  }
  lua_rawgeti(call.thread, LUA_REGISTRYINDEX, fn);
  return call.thread;
}

LuaStep LuaVm::run(LuaCall& call, int nargs) { return step(call, nargs); }
LuaStep LuaVm::resume(LuaCall& call) { return step(call, 0); }
LuaStep LuaVm::resumeWith(LuaCall& call, int nresults) { return step(call, nresults); }

int LuaVm::wait(lua_State* L) {
  LuaVm* vm = *static_cast<LuaVm**>(lua_getextraspace(L));
  vm->waiting_ = true;
  return lua_yield(L, 0);
}

LuaStep LuaVm::step(LuaCall& call, int nargs) {
  const auto start = std::chrono::steady_clock::now();
  cpu_end_ = start + (budgets_.cpu - std::chrono::duration_cast<std::chrono::microseconds>(call.used));
  slice_end_ = start + budgets_.slice;
  const int status = resumeOnce(call, nargs);
  call.used += std::chrono::steady_clock::now() - start;
  return settle(call, status);
}

namespace {
std::chrono::nanoseconds threadCpu() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}
}  // namespace

LuaStep LuaVm::runToEnd(LuaCall& call, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto cpu_start = threadCpu();
    cpu_end_ = deadline;  // the hook's wall-clock bound; the CPU budget is counted below
    slice_end_ = std::chrono::steady_clock::now() + kOffLoopSlice;
    const int status = resumeOnce(call, 0);
    call.used += threadCpu() - cpu_start;
    const LuaStep s = settle(call, status);
    if (s != LuaStep::Yielded) return s;  // Waiting too: the I/O is the worker's
    if (call.used >= budgets_.cpu) {
      call.failure = LuaFailure::Cpu;
      broken_ = true;
      return LuaStep::Failed;
    }
  }
}

int LuaVm::resumeOnce(LuaCall& call, int nargs) {
  over_ = LuaFailure::None;
  memory_refused_ = false;
  waiting_ = false;
  int nres = 0;
  enforce_ = true;
  const int status = lua_resume(call.thread, nullptr, nargs, &nres);
  enforce_ = false;
  call.results = nres;
  return status;
}

LuaStep LuaVm::settle(LuaCall& call, int status) {
  if (memory_refused_) {  // even when the plugin caught the error: the budget was broken
    call.failure = LuaFailure::Memory;
  } else if (over_ != LuaFailure::None) {
    call.failure = over_;
  } else if (status == LUA_OK) {
    return LuaStep::Done;
  } else if (status == LUA_YIELD) {
    call.results = 0;
    if (waiting_) return LuaStep::Waiting;
    return LuaStep::Yielded;
  } else {
    call.failure = status == LUA_ERRMEM ? LuaFailure::Memory : LuaFailure::Error;
    call.message = errorText(call.thread);
  }
  call.results = 0;
  if (call.failure != LuaFailure::Error) broken_ = true;
  return LuaStep::Failed;
}

void LuaVm::release(LuaCall& call) {
  if (!call.thread) return;
  if (call.failure == LuaFailure::None && !broken_ && lua_status(call.thread) == LUA_OK && idle_threads_.size() < kIdleThreads) {
    lua_settop(call.thread, 0);
    idle_threads_.emplace_back(call.thread, call.thread_ref);
  } else {
    luaL_unref(L_, LUA_REGISTRYINDEX, call.thread_ref);
  }
  call.thread = nullptr;
  call.thread_ref = LUA_NOREF;
}

}  // namespace tahua
