// One plugin's Lua 5.4 state on one worker, and the sandbox around it (docs/plugins.md).
//
// - Memory: every allocation of the state goes through an allocator that refuses to
//   pass `memory_bytes`; Lua turns the refusal into a "not enough memory" error.
// - CPU: a count hook looks at the clock every kHookInstructions VM instructions. A call
//   runs in slices of at most `slice` on the worker's event loop: when a slice is used
//   up the hook yields (a yield from a hook cannot be caught by pcall), and the caller
//   resumes the call later, after other work of the loop. Past `cpu` (the slices
//   summed) the call is abandoned. Where a yield is impossible (inside a callback of a C
//   function: table.sort's comparator, gsub's replacement function) running past the
//   slice is an error.
// - C functions the hook cannot interrupt are bounded: pattern matching runs in linear
//   time (lua_patterns.h), string.rep of nothing, and the table functions over tables
//   with metatables or huge ranges are refused.
// - Libraries: base (without load, dofile, loadfile, collectgarbage, print), string
//   (without dump), table, math, utf8, and os.time/clock/date/difftime. No io, package,
//   require, debug or coroutine; text chunks only; no __gc metamethods (finalizers run
//   with hooks off).
// A call that breaks a budget leaves the state broken(): the owner discards it (calls
// still running on it may finish) and builds a fresh one from the compiled chunk.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

struct lua_State;
struct lua_Debug;

namespace tahua {

struct LuaBudgets {
  std::size_t memory_bytes = 1 << 20;
  std::chrono::microseconds cpu{50'000};   // per call, its slices summed
  std::chrono::microseconds slice{1'000};  // the longest run on the event loop at once
};

// Why a call failed.
enum class LuaFailure : std::uint8_t { None, Error, Cpu, Memory, Slice };
std::string_view luaFailureName(LuaFailure f);  // "error", "cpu_budget", "memory_budget", "slice"

// One call of a plugin function, perhaps run in several slices.
struct LuaCall {
  lua_State* thread = nullptr;
  int thread_ref = -2;  // LUA_NOREF
  std::chrono::nanoseconds used{0};
  LuaFailure failure = LuaFailure::None;
  std::string message;  // the error, for Error
  int results = 0;      // values on thread's stack once done
};

// Yielded: the slice ended (resume it later); Waiting: a host function waits for I/O
// (LuaVm::wait), and the call goes on with its answer (resumeWith).
enum class LuaStep { Done, Yielded, Waiting, Failed };

class LuaVm {
 public:
  static constexpr int kHookInstructions = 1000;

  // Compiles `source` (Lua text; bytecode is refused) into a binary chunk named `name`.
  // For the loader, off the workers. False with `error` ("name:line: message").
  static bool compile(std::string_view source, std::string_view name, std::string& bytecode, std::string& error);

  explicit LuaVm(const LuaBudgets& budgets);
  ~LuaVm();
  LuaVm(const LuaVm&) = delete;
  LuaVm& operator=(const LuaVm&) = delete;

  // Loads a compiled chunk and runs its top level, which must return a table of
  // functions (at once, within the budgets). False with `error`.
  bool load(std::string_view bytecode, std::string_view name, std::string& error);
  lua_State* state() const { return L_; }
  // A registry reference to function `name` of the plugin's table; LUA_NOREF (-2) if absent.
  int function(const char* name) const;

  // A call of function `fn` (a registry reference): returns the thread to push the
  // arguments on, then run(call, nargs), and resume(call) while it yields.
  lua_State* prepare(LuaCall& call, int fn);
  LuaStep run(LuaCall& call, int nargs);
  LuaStep resume(LuaCall& call);
  // After Waiting: the `nresults` values pushed on call.thread are what the waiting host
  // function returns to the plugin.
  LuaStep resumeWith(LuaCall& call, int nresults);
  // For a host function that must wait: `return LuaVm::wait(L);` suspends the call with
  // LuaStep::Waiting. Only where the call can yield (lua_isyieldable).
  static int wait(lua_State* L);
  // Off the event loop, on a thread of its own: resumes a yielded call until it ends, in
  // slices of kOffLoopSlice, its CPU counted from the thread's own clock (a thread that
  // waits for a core is not charged), abandoned past the CPU budget or at `deadline`
  // (wall clock: a call that gets no CPU does not hold its request forever).
  LuaStep runToEnd(LuaCall& call, std::chrono::steady_clock::time_point deadline);
  static constexpr std::chrono::milliseconds kOffLoopSlice{5};
  // After Done or Failed (or to abandon a yielded call): drops the call's thread, or
  // keeps it for the next call.
  void release(LuaCall& call);

  bool broken() const { return broken_; }
  // A call was abandoned mid-way (a synchronous phase ran past its slice): the state may
  // hold its half-done changes, so it is rebuilt.
  void markBroken() { broken_ = true; }
  std::size_t memoryUsed() const { return used_; }
  const LuaBudgets& budgets() const { return budgets_; }

 private:
  static void* allocate(void* ud, void* ptr, std::size_t osize, std::size_t nsize);
  static void hook(lua_State* L, lua_Debug* ar);
  LuaStep step(LuaCall& call, int nargs);
  int resumeOnce(LuaCall& call, int nargs);
  LuaStep settle(LuaCall& call, int status);

  LuaBudgets budgets_;
  lua_State* L_ = nullptr;
  std::size_t used_ = 0;
  bool enforce_ = false;  // the memory budget holds while plugin code runs
  bool memory_refused_ = false;
  bool waiting_ = false;  // the yield is a host function's wait, not the hook's
  bool broken_ = false;
  int table_ref_ = -2;
  std::vector<std::pair<lua_State*, int>> idle_threads_;
  // The running slice's limits, read by the hook.
  std::chrono::steady_clock::time_point slice_end_{};
  std::chrono::steady_clock::time_point cpu_end_{};
  LuaFailure over_ = LuaFailure::None;
};

}  // namespace tahua
