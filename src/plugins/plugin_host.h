// A plugin on one worker: its Lua states (rebuilt from the compiled chunk when a call
// broke a budget), its breaker, its metrics, and the calls into it (docs/plugins.md):
//
//   on_request(req), on_response_headers(resp), on_auth(req): the call object (plugin_api.h)
//   on_stream_event(ev): a table {event, data, index}; on_complete(info): a table
//
// A call's changes are recorded in PluginEffects and applied by the plugin filter only
// when the call returns normally: a plugin that fails leaves the request as it was.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/plugin_config.h"
#include "core/duration.h"
#include "http/outbound_call.h"
#include "plugins/lua_sandbox.h"
#include "telemetry/metrics.h"

namespace boost::json {
class value;
}

namespace tahua {

// LUA_NOREF, for code that holds Lua references without including Lua's headers.
inline constexpr int kLuaNoRef = -2;

struct RequestContext;
class StateStore;

// What one call asked for.
struct PluginEffects {
  PluginEffects();
  ~PluginEffects();
  void clear();

  std::vector<std::pair<std::string, std::string>> set_headers;  // upstream request (request phase) or response
  std::vector<std::string> removed_headers;                      // response phase
  std::vector<std::pair<std::string, std::unique_ptr<boost::json::value>>> set_fields;  // null value: erase
  bool denied = false;
  int deny_status = 403;
  std::string deny_message;
  std::string deny_code;
  // on_request: req:pin_version(v), an upstream selection hint (the balancer's version pin)
  std::string pin_version;
  // on_auth: req:authenticate(tenant [, key]) (checked against the tenants and keys by the auth link)
  bool authenticated = false;
  std::string auth_tenant;
  std::string auth_key;
};

// The request body as JSON, parsed on the first read of a field.
class PluginBody {
 public:
  PluginBody();
  ~PluginBody();
  // Starts over with another request's body (the object is reused).
  void reset(const std::string& text);
  // Null when the body is not a JSON object.
  const boost::json::value* root();
  // The value at a dotted path (objects by key, arrays by index), or null.
  const boost::json::value* find(std::string_view path);
  // Applies a call's field changes (after it returned); true when any applied.
  bool apply(PluginEffects& effects);
  // The body with the changes, serialized.
  std::string serialize() const;

 private:
  const std::string* text_ = nullptr;
  std::unique_ptr<boost::json::value> json_;
  bool parsed_ = false;
};

// What a call may see and touch; reached from Lua through a userdata whose pointer is
// cleared when the call ends (a plugin that keeps the object gets an error, not a
// dangling pointer).
// A call of the key-value store that waits for the store (tahua.kv.get): the call is
// suspended (LuaStep::Waiting) until the worker has the value.
struct PluginWait {
  enum class Kind : std::uint8_t { None, KvGet, Http } kind = Kind::None;
  std::string key;  // KvGet: the store's key ("tahua:kv:<plugin>:<key>")
  OutboundRequest http;  // Http: the call (its host allowed, its bounds the plugin's)
};

// A write of the key-value store, made when the call returns normally.
struct PluginKvWrite {
  std::string key;  // the store's key
  std::string value;
  Millis ttl{0};
  bool erase = false;
};

// One call: what it may see and touch (reached from Lua through a userdata whose pointer
// is cleared when the call ends: a plugin that keeps the object gets an error, not a
// dangling pointer), and what it did besides its effects. It belongs to the call, not to
// the runtime: calls of one runtime interleave while some wait for the store.
struct PluginCallView {
  RequestContext* ctx = nullptr;
  std::uint8_t phase = 0;
  PluginEffects* effects = nullptr;
  PluginBody* body = nullptr;  // request phase
  const std::vector<std::pair<std::string_view, std::string_view>>* response_headers = nullptr;
  std::string& scratch() { return scratch_; }  // text on its way into Lua

  // Starts a call of `phase` for `ctx` (capacity kept).
  void begin(RequestContext* c, std::uint8_t ph, PluginEffects* e) {
    ctx = c;
    phase = ph;
    effects = e;
    body = nullptr;
    response_headers = nullptr;
    log_left = 0;
    counts.clear();
    wait = PluginWait{};
    writes.clear();
    gets_left = 0;
    http_left = 0;
  }
  // Set by prepare(), read and written by the API functions while the call runs; the
  // counts and writes are applied by finish() on the worker.
  int log_left = 0;
  std::vector<std::pair<std::string, std::int64_t>> counts;
  PluginWait wait;
  std::vector<PluginKvWrite> writes;
  int gets_left = 0;
  int http_left = 0;

 private:
  std::string scratch_;
};

class PluginInstance;

// A Lua state with the plugin loaded, and its phase functions. A plugin has one per
// worker, and more while a long call runs on one off the event loop (busy).
struct PluginRuntime {
  PluginRuntime(const LuaBudgets& budgets, PluginInstance& instance) : vm(budgets), instance(instance) {}
  LuaVm vm;
  int functions[kPluginPhases] = {kLuaNoRef, kLuaNoRef, kLuaNoRef, kLuaNoRef, kLuaNoRef};  // by phase bit index
  PluginInstance& instance;
  bool busy = false;  // a call runs on it off the event loop (set and read on the worker only)
  // The call running now (one at a time, on whichever thread runs it), for the API
  // functions; null between slices.
  PluginCallView* call = nullptr;
};

enum class PluginOutcome : std::uint8_t { Ok, Error, Cpu, Memory, Slice, BreakerOpen };
constexpr std::size_t kPluginOutcomes = 6;
std::string_view pluginOutcomeName(PluginOutcome o);

class PluginInstance {
 public:
  // `store`: where tahua.kv lives (null: nowhere, as in self-tests: gets find nothing).
  PluginInstance(const PluginConfig& config, WorkerMetrics& metrics, StateStore* store = nullptr);
  ~PluginInstance();
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;
  const PluginConfig& config() const { return config_; }

  // A runtime to call into: one not busy off the loop and not broken, or a fresh one (at
  // most kMaxRuntimes). Null (and a log line) when none can be had.
  std::shared_ptr<PluginRuntime> runtime();
  static constexpr std::size_t kMaxRuntimes = 4;

  // A call of view.phase's function: push its argument with one of the push functions on
  // the returned thread, then run(); while it yields, resume it (runToEnd off the loop;
  // resumeWith after a wait); finish() at the end. `view` stays put until then.
  lua_State* prepare(PluginRuntime& rt, LuaCall& call, PluginCallView& view);
  // The call object for `view` (valid until finish()).
  void pushView(PluginRuntime& rt, lua_State* thread, PluginCallView& view, int& handle_ref);
  // {event = name or nil, data = text, index = n}
  static void pushEvent(lua_State* thread, std::string_view event, std::string_view data, std::uint32_t index);
  // {id, model, tenant, key, status, error, prompt_tokens, completion_tokens, duration_ms, stream}
  static void pushCompletion(lua_State* thread, const RequestContext& ctx);
  // What a finished stream-event call answered: nil or true keep the event, false drops
  // it, a string replaces its data, an array of strings or {event =, data =} tables
  // replaces it with those events (at most 16). False when the answer is none of these
  // (or an event name has a line break).
  enum class EventVerdict { Keep, Drop, Replace };
  static bool readEventResult(const LuaCall& call, EventVerdict& verdict, std::vector<std::pair<std::string, std::string>>& events);
  LuaStep run(PluginRuntime& rt, LuaCall& call, PluginCallView& view);
  // The rest of a call that used up its first slice, on a thread of its own (see
  // LuaVm::runToEnd); the runtime is busy meanwhile. Waiting: the call asks for the
  // store (view.wait), which only the worker may use.
  LuaStep runToEnd(PluginRuntime& rt, LuaCall& call, PluginCallView& view, std::chrono::steady_clock::time_point deadline);
  // A call that waited (LuaStep::Waiting) goes on, with the store's answer: `value`, or
  // nil and `error` when there is none.
  LuaStep resumeWith(PluginRuntime& rt, LuaCall& call, PluginCallView& view, const std::string* value, std::string_view error);
  // Ends a call: clears the call object, records the outcome (metrics, breaker, a log
  // line for failures), makes the call's store writes when it returned normally, and
  // returns the outcome. The call's results stay on call.thread until rt.vm.release(call).
  PluginOutcome finish(PluginRuntime& rt, LuaCall& call, PluginCallView& view, int handle_ref);

  // A call that waited for tahua.http goes on with the answer: a table {status, body,
  // headers}, or nil and the error.
  LuaStep resumeWithHttp(PluginRuntime& rt, LuaCall& call, PluginCallView& view, const OutboundResponse& response);
  // The breaker of the host of a tahua.http call: open after `http.breaker_failures`
  // failures in a row (no answer, or 5xx) for `http.breaker_cooldown`.
  bool httpBreakerOpen(const HttpUrl& url, std::chrono::steady_clock::time_point now) const;
  void httpAnswered(const HttpUrl& url, const OutboundResponse& response);
  void countHttpRefused() noexcept;      // a host not on the allow-list (no call made)
  void countHttpBreakerOpen() noexcept;  // the host's breaker open (no call made)

  // The store's key for the plugin's key `key` (its own namespace, or the shared one).
  std::string kvKey(std::string_view key, bool shared) const;
  // A tahua.kv.get's answer (0 found, 1 missing, 2 unavailable), counted through a
  // pointer resolved on first use (no strings built per lookup).
  void countKvGet(int answer) noexcept;

  // The breaker: open after `breaker_failures` failures in a row, for `breaker_cooldown`.
  bool breakerOpen(std::chrono::steady_clock::time_point now) const { return now < open_until_; }
  void countSkipped(std::uint8_t phase);      // a call the open breaker skipped
  void countUnavailable(std::uint8_t phase);  // no runtime could be had: an error outcome

  // For the API functions (tahua.log): a line with the plugin and the call's request id.
  void log(PluginCallView& view, std::string_view message) noexcept;
  StateStore* store() const { return store_; }

 private:
  std::uint64_t& calls(std::uint8_t phase, PluginOutcome outcome);

  const PluginConfig& config_;
  WorkerMetrics& metrics_;
  StateStore* store_;
  void count(std::string_view name, std::int64_t n) noexcept;

  std::vector<std::shared_ptr<PluginRuntime>> runtimes_;
  std::uint32_t failures_in_row_ = 0;
  std::chrono::steady_clock::time_point open_until_{};
  std::chrono::steady_clock::time_point next_build_{};  // after a failed build, when to try again
  std::uint64_t* calls_[kPluginPhases][kPluginOutcomes] = {};
  FineHistogram* seconds_ = nullptr;
  std::vector<std::pair<std::string, std::uint64_t*>> counters_;  // tahua.count's names (at most 32)
  struct HostBreaker {
    std::uint32_t failures_in_row = 0;
    std::chrono::steady_clock::time_point open_until{};
  };
  std::vector<std::pair<std::string, HostBreaker>> http_breakers_;
  std::uint64_t* kv_gets_[3] = {};  // by "host:port" (the allow-list bounds them)
};

}  // namespace tahua
