#include "plugins/plugin_host.h"

#include <boost/json.hpp>

#include <chrono>
#include <lua.hpp>

#include "core/json_read.h"
#include "core/log.h"
#include "plugins/plugin_api.h"
#include "plugins/plugin_code.h"
#include "request/request_context.h"
#include "store/state_store.h"

namespace tahua {

static_assert(kLuaNoRef == LUA_NOREF);

namespace json = boost::json;

namespace {

constexpr std::chrono::seconds kRebuildPause{1};  // after a runtime failed to build

int phaseIndex(std::uint8_t phase) {
  switch (phase) {
    case kPluginRequest: return 0;
    case kPluginResponseHeaders: return 1;
    case kPluginStreamEvent: return 2;
    case kPluginComplete: return 3;
    default: return 4;
  }
}

std::string_view phaseName(std::uint8_t phase) {
  switch (phase) {
    case kPluginRequest: return "request";
    case kPluginResponseHeaders: return "response_headers";
    case kPluginStreamEvent: return "stream_event";
    case kPluginComplete: return "complete";
    default: return "auth";
  }
}

// Runs C++ work that may throw (an allocation) where Lua cannot see an exception: false
// if it threw, and the caller raises a Lua error instead.
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
  pin_version.clear();
  authenticated = false;
  auth_tenant.clear();
  auth_key.clear();
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
      json::value v = text_ ? readJson(*text_, ec) : json::value();
      if (!ec && v.is_object()) json_ = std::make_unique<json::value>(std::move(v));
    } catch (...) {
      json_.reset();
    }
  }
  return json_.get();
}

const json::value* PluginBody::find(std::string_view path) { return jsonAt(root(), path); }

bool PluginBody::apply(PluginEffects& effects) {
  if (effects.set_fields.empty() || !root()) return false;
  bool changed = false;
  try {
    std::vector<std::string_view> segs;
    for (auto& [path, value] : effects.set_fields) {
      if (!splitJsonPath(path, segs)) continue;
      // Objects by key (made when missing), arrays by index (within them): the paths
      // `field` reads. set_field refused any other when it was called.
      json::value* at = json_.get();
      bool ok = true;
      for (std::size_t i = 0; ok && i + 1 < segs.size(); ++i) {
        std::size_t index = 0;
        if (auto* o = at->if_object()) {
          json::value& next = (*o)[segs[i]];
          if (next.is_null()) next = json::object();
          at = &next;
        } else if (auto* a = at->if_array(); a && arrayIndex(segs[i], index) && index < a->size()) {
          at = &(*a)[index];
        } else {
          ok = false;
        }
      }
      if (!ok) continue;
      std::size_t index = 0;
      if (auto* o = at->if_object()) {
        if (value) (*o)[segs.back()] = *value;
        else o->erase(segs.back());
      } else if (auto* a = at->if_array(); a && arrayIndex(segs.back(), index) && index < a->size()) {
        if (value) (*a)[index] = *value;
        else a->erase(a->begin() + static_cast<std::ptrdiff_t>(index));
      } else {
        continue;
      }
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

PluginInstance::PluginInstance(const PluginConfig& config, WorkerMetrics& metrics, StateStore* store)
    : config_(config), metrics_(metrics), store_(store) {
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
  installPluginApi(rt->vm.state(), rt.get());
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

lua_State* PluginInstance::prepare(PluginRuntime& rt, LuaCall& call, PluginCallView& view) {
  view.log_left = kMaxPluginLogLines;
  view.gets_left = kMaxPluginKvGets;
  view.http_left = kMaxPluginHttpCalls;
  view.counts.clear();
  view.writes.clear();
  view.wait = PluginWait{};
  return rt.vm.prepare(call, rt.functions[phaseIndex(view.phase)]);
}

void PluginInstance::pushView(PluginRuntime&, lua_State* thread, PluginCallView& view, int& handle_ref) {
  pushCallObject(thread, view, handle_ref);  // cleared in finish()
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

LuaStep PluginInstance::run(PluginRuntime& rt, LuaCall& call, PluginCallView& view) {
  rt.call = &view;
  const int nargs = lua_gettop(call.thread) - 1;
  const LuaStep s = rt.vm.run(call, nargs);
  rt.call = nullptr;
  return s;
}

LuaStep PluginInstance::runToEnd(PluginRuntime& rt, LuaCall& call, PluginCallView& view,
                                 std::chrono::steady_clock::time_point deadline) {
  rt.call = &view;
  const LuaStep s = rt.vm.runToEnd(call, deadline);
  rt.call = nullptr;
  return s;
}

LuaStep PluginInstance::resumeWith(PluginRuntime& rt, LuaCall& call, PluginCallView& view, const std::string* value,
                                   std::string_view error) {
  view.wait = PluginWait{};
  // Outside the resume the memory budget is not enforced: pushing cannot fail on it, and
  // a value is bounded by the store (kMaxValueBytes).
  int n = 1;
  if (value) {
    lua_pushlstring(call.thread, value->data(), value->size());
  } else {
    lua_pushnil(call.thread);
    if (!error.empty()) {
      lua_pushlstring(call.thread, error.data(), error.size());
      n = 2;
    }
  }
  rt.call = &view;
  const LuaStep s = rt.vm.resumeWith(call, n);
  rt.call = nullptr;
  return s;
}

LuaStep PluginInstance::resumeWithHttp(PluginRuntime& rt, LuaCall& call, PluginCallView& view, const OutboundResponse& r) {
  view.wait = PluginWait{};
  lua_State* t = call.thread;
  int n = 1;
  if (r.status == 0) {
    lua_pushnil(t);
    lua_pushlstring(t, r.error.data(), r.error.size());
    n = 2;
  } else {
    lua_createtable(t, 0, 3);
    lua_pushinteger(t, r.status);
    lua_setfield(t, -2, "status");
    lua_pushlstring(t, r.body.data(), r.body.size());
    lua_setfield(t, -2, "body");
    lua_createtable(t, 0, static_cast<int>(r.headers.size()));
    for (const auto& [name, value] : r.headers) {
      lua_pushlstring(t, value.data(), value.size());
      lua_setfield(t, -2, name.c_str());  // a repeated header: the last one
    }
    lua_setfield(t, -2, "headers");
  }
  rt.call = &view;
  const LuaStep s = rt.vm.resumeWith(call, n);
  rt.call = nullptr;
  return s;
}

namespace {
std::string hostKey(const HttpUrl& url) { return url.host + ":" + url.port; }
}  // namespace

bool PluginInstance::httpBreakerOpen(const HttpUrl& url, std::chrono::steady_clock::time_point now) const {
  const std::string key = hostKey(url);
  for (const auto& [k, b] : http_breakers_)
    if (k == key) return now < b.open_until;
  return false;
}

void PluginInstance::httpAnswered(const HttpUrl& url, const OutboundResponse& response) {
  const bool failed = response.status == 0 || response.status >= 500;
  std::string result = response.status == 0 ? (response.error == "timeout" ? "timeout" : "error") : std::to_string(response.status / 100) + "xx";
  try {
    ++metrics_.plugin_http[{config_.id, std::move(result)}];
    const std::string key = hostKey(url);
    HostBreaker* b = nullptr;
    for (auto& [k, hb] : http_breakers_)
      if (k == key) b = &hb;
    if (!b) b = &http_breakers_.emplace_back(key, HostBreaker{}).second;
    if (!failed) {
      b->failures_in_row = 0;
    } else if (++b->failures_in_row >= config_.http.breaker_failures) {
      b->failures_in_row = 0;
      b->open_until = std::chrono::steady_clock::now() + config_.http.breaker_cooldown;
      log::warn("plugin http breaker opened", {{"plugin", config_.id}, {"host", key}, {"error", response.error},
                                               {"status", response.status}});
    }
  } catch (...) {
  }
}

void PluginInstance::countHttpRefused() noexcept {
  try {
    ++metrics_.plugin_http[{config_.id, "not_allowed"}];
  } catch (...) {
  }
}

void PluginInstance::countHttpBreakerOpen() noexcept {
  try {
    ++metrics_.plugin_http[{config_.id, "breaker_open"}];
  } catch (...) {
  }
}

std::string PluginInstance::kvKey(std::string_view key, bool shared) const {
  // Plugin ids have no '~': the shared namespace cannot be a plugin's.
  std::string out = "tahua:kv:";
  out.append(shared ? std::string_view("~shared") : std::string_view(config_.id)).append(":").append(key);
  return out;
}

void PluginInstance::countKvGet(int answer) noexcept {
  static constexpr const char* kAnswers[] = {"found", "missing", "unavailable"};
  if (answer < 0 || answer > 2) return;
  try {
    if (!kv_gets_[answer]) kv_gets_[answer] = &metrics_.plugin_kv[{config_.id, "get", kAnswers[answer]}];
    ++*kv_gets_[answer];
  } catch (...) {
  }
}

PluginOutcome PluginInstance::finish(PluginRuntime& rt, LuaCall& call, PluginCallView& view, int handle_ref) {
  const std::uint8_t phase = view.phase;
  const RequestContext& ctx = *view.ctx;
  endCallObject(rt.vm.state(), handle_ref);
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
  for (const auto& [name, n] : view.counts) count(name, n);
  view.counts.clear();
  if (outcome == PluginOutcome::Ok) {
    failures_in_row_ = 0;
    // The call's writes, now that it returned normally. Not waited for: a write the
    // store refuses is counted (result error) and logged, never silently lost.
    for (auto& w : view.writes) {
      if (!store_) break;
      const std::string_view op = w.erase ? "erase" : "put";
      // The answer may come after this instance is gone (a config swap): it holds copies.
      auto done = [metrics = &metrics_, id = config_.id, op, key = w.key](std::optional<std::string> error) {
        try {
          ++metrics->plugin_kv[{id, std::string(op), error ? "error" : "ok"}];
          if (error) log::warn("plugin key-value write failed", {{"plugin", id}, {"op", op}, {"key", key}, {"error", *error}});
        } catch (...) {
        }
      };
      if (w.erase) store_->eraseValue(w.key, std::move(done));
      else store_->putValue(w.key, std::move(w.value), w.ttl, std::move(done));
    }
    view.writes.clear();
    return outcome;
  }
  view.writes.clear();
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
void PluginInstance::countUnavailable(std::uint8_t phase) { ++calls(phase, PluginOutcome::Error); }

void PluginInstance::log(PluginCallView& view, std::string_view message) noexcept {
  if (view.log_left <= 0) return;  // a plugin logging in a loop: the first lines of each call only
  --view.log_left;
  try {
    log::info("plugin log", {{"plugin", config_.id},
                             {"request_id", view.ctx ? std::string_view(view.ctx->request_id) : std::string_view()},
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
  if (counters_.size() >= kMaxPluginCounters) return;  // bounded series per plugin: the rest is dropped
  try {
    std::uint64_t* counter = &metrics_.plugin_counters[{config_.id, std::string(name)}];
    counters_.emplace_back(std::string(name), counter);
    *counter += static_cast<std::uint64_t>(n);
  } catch (...) {
  }
}

}  // namespace tahua
