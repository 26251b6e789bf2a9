#include "filters/plugins/plugin_filter.h"

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <bitset>
#include <chrono>
#include <list>
#include <optional>
#include <unordered_map>
#include <variant>

#include "core/ascii.h"
#include "core/error.h"
#include "core/log.h"
#include "filters/plugins/plugin_set.h"
#include "http/request_inspect.h"
#include "plugins/plugin_host.h"
#include "sse/sse_parser.h"
#include "telemetry/metrics.h"

namespace tahua {
namespace {

// plugins_section.cpp numbers the API paths a plugin may be limited to by Endpoint.
static_assert(static_cast<int>(Endpoint::ChatCompletions) == 1 && static_cast<int>(Endpoint::Completions) == 2 &&
              static_cast<int>(Endpoint::Embeddings) == 3 && static_cast<int>(Endpoint::Models) == 4 &&
              static_cast<int>(Endpoint::Responses) == 5 && static_cast<int>(Endpoint::Messages) == 6 &&
              static_cast<int>(Endpoint::CountTokens) == 7 && static_cast<int>(Endpoint::Moderations) == 9 &&
              static_cast<int>(Endpoint::ImagesGenerations) == 10 && static_cast<int>(Endpoint::Rerank) == 11 &&
              static_cast<int>(Endpoint::AudioTranscriptions) == 12 && static_cast<int>(Endpoint::ImagesEdits) == 15 &&
              static_cast<int>(Endpoint::Files) == 16 && static_cast<int>(Endpoint::Batches) == 19 &&
              static_cast<int>(Endpoint::Realtime) == 22 && static_cast<int>(Endpoint::Mcp) == 23);
constexpr std::size_t kEndpoints = kEndpointCount;  // by_endpoint_ is indexed by Endpoint
constexpr std::size_t kMaxPlugins = PluginSet::kMaxPlugins;

using PluginBits = std::bitset<kMaxPlugins>;

// An event on its way out: the original bytes, or a new event and data.
struct OutEvent {
  std::string_view raw;  // set while unchanged
  std::string event;
  std::string data;
};

// The client's headers as the filters after the plugins see them: a plugin's upstream
// selection hint (pin_version) reads as the X-Tahua-Version pin the balancer obeys.
class HintedHeaders final : public HeaderView {
 public:
  std::string_view get(std::string_view name) const override {
    if (!version.empty() && iequals(name, "x-tahua-version")) return version;
    return base ? base->get(name) : std::string_view{};
  }
  const HeaderView* base = nullptr;
  std::string version;
};

// A request's plugin work, for requests some plugin applies to; kept by the filter for
// the next such request when this one ends (no allocation per request once warm).
struct PluginRequestData {
  // Ready for another request: everything cleared, capacity kept.
  void reset(const std::string& body_text) {
    body.reset(body_text);
    effects.clear();
    view.begin(nullptr, 0, nullptr);
    rt.reset();
    call = LuaCall{};
    handle_ref = kLuaNoRef;
    upstream_headers.clear();
    body_changed = false;
    kept.clear();
    parser.reset();
    pending.clear();
    joined.clear();
    out.clear();
    events.clear();
    next_events.clear();
    event_index = 0;
    stream_off = false;
    in_flight = false;
    hinted.base = nullptr;
    hinted.version.clear();
  }
  PluginBody body;
  PluginEffects effects;
  PluginCallView view;
  // The request-phase call paused between slices.
  std::shared_ptr<PluginRuntime> rt;
  LuaCall call;
  int handle_ref = kLuaNoRef;
  bool in_flight = false;  // the call goes on through the set (plugin thread, store): it owns the data until done
  HintedHeaders hinted;    // ctx.headers while a hint applies
  std::vector<std::pair<std::string, std::string>> upstream_headers;
  bool body_changed = false;
  std::list<std::string> kept;  // response header names and values set by plugins (headers are views)
  // Streams: events cut at their boundaries; an unfinished one is held back.
  SseParser parser;
  std::string pending;
  std::string joined;  // an event that began in an earlier read, whole
  std::string out;
  std::vector<OutEvent> events, next_events;
  std::vector<std::pair<std::string, std::string>> replacement;
  std::uint32_t event_index = 0;
  bool stream_off = false;  // an event over the parser's bound, or a fail-closed plugin ended the stream
};

struct PluginState {
  PluginBits selected;
  std::uint8_t phases = 0;  // of the selected plugins
  std::size_t next = 0;     // the request phase's next plugin
  std::unique_ptr<PluginRequestData> data;
  std::vector<std::unique_ptr<PluginRequestData>>* spare = nullptr;  // where data goes back
  ~PluginState() {
    // A call still running on the plugin thread uses the data: a request torn down
    // without its answer (a worker stopping) leaves it to that call rather than free it
    // under it.
    if (data && data->in_flight) {
      (void)data.release();
      return;
    }
    if (!data || !spare || spare->size() >= 64) return;
    data->rt.reset();  // a runtime replaced meanwhile is freed now, not when the data is reused
    spare->push_back(std::move(data));
  }
};

bool anyGlob(const std::vector<std::string>& globs, const std::string& name) {
  for (const auto& g : globs)
    if (::fnmatch(g.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

void encodeEvent(std::string& out, std::string_view event, std::string_view data) {
  if (!event.empty()) out.append("event: ").append(event).append("\n");
  std::size_t start = 0;
  for (;;) {
    const std::size_t nl = data.find('\n', start);
    out.append("data: ").append(data.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start)).append("\n");
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out.append("\n");
}

class PluginFilter final : public FilterWithState<PluginState> {
 public:
  PluginFilter(ConfigPtr config, std::shared_ptr<PluginSet> set)
      : config_(std::move(config)), set_(std::move(set)), instances_(set_->instances()) {
    for (std::size_t i = 0; i < instances_.size(); ++i) {
      const PluginConfig& p = instances_[i]->config();
      if (!(p.phases & ~kPluginAuth)) continue;  // on_auth runs as a link of auth.chains, not here
      for (std::size_t e = 0; e < kEndpoints; ++e)
        if (p.supports.endpoints == 0 || (p.supports.endpoints >> e & 1)) by_endpoint_[e].set(i);
      if (!p.supports.headers.empty()) with_headers_.set(i);
      tenant_matchers_ = tenant_matchers_ || !p.supports.tenants.empty();
      key_matchers_ = key_matchers_ || !p.supports.keys.empty();
      any_stream_ = any_stream_ || (p.phases & kPluginStreamEvent);
    }
  }

  std::string_view name() const override { return "plugins"; }

  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    PluginState& st = state(ctx);
    if (st.data) return FilterStatus::Continue;  // already ran (a reselection)
    select(ctx, st);
    if (!(st.phases & kPluginRequest)) return FilterStatus::Continue;
    return runRequest(ctx, st);
  }

  void onUpstreamRequest(RequestContext& ctx, UpstreamRequestHeaders& headers) override {
    PluginState& st = state(ctx);
    if (!st.data) return;
    for (const auto& [k, v] : st.data->upstream_headers) headers.add(k, v);
  }

  void onResponseHeaders(RequestContext& ctx) override {
    PluginState& st = state(ctx);
    if (!(st.phases & kPluginResponseHeaders) || !ctx.response_headers) return;
    PluginRequestData& d = *st.data;
    auto& headers = *ctx.response_headers;
    forEach(st, kPluginResponseHeaders, [&](PluginInstance& in) {
      d.effects.clear();
      d.view.begin(&ctx, kPluginResponseHeaders, &d.effects);
      d.view.response_headers = &headers;
      if (callSync(d.view, in, [&](PluginRuntime& rt, lua_State* t, int& ref) { in.pushView(rt, t, d.view, ref); }) != PluginOutcome::Ok)
        return;
      for (const auto& name : d.effects.removed_headers)
        std::erase_if(headers, [&](const auto& kv) { return iequals(kv.first, name); });
      for (auto& [name, value] : d.effects.set_headers) {
        std::erase_if(headers, [&](const auto& kv) { return iequals(kv.first, name); });
        const std::string& n = d.kept.emplace_back(std::move(name));
        const std::string& v = d.kept.emplace_back(std::move(value));
        headers.emplace_back(n, v);
      }
    });
  }

  bool wantsResponseData() const override { return any_stream_; }

  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    PluginState& st = state(ctx);
    if (!(st.phases & kPluginStreamEvent) || !ctx.streaming) return;
    PluginRequestData& d = *st.data;
    if (data.aborted()) {
      d.pending.clear();
      return;
    }
    if (d.stream_off) return;
    const std::string_view bytes = data.bytes();
    d.out.clear();
    bool changed = !d.pending.empty();
    std::size_t cut = 0;
    struct Sink final : SseSink {
      PluginFilter& f;
      RequestContext& ctx;
      PluginState& st;
      std::string_view bytes;
      std::size_t& cut;
      bool& changed;
      Sink(PluginFilter& f, RequestContext& ctx, PluginState& st, std::string_view bytes, std::size_t& cut, bool& changed)
          : f(f), ctx(ctx), st(st), bytes(bytes), cut(cut), changed(changed) {}
      void onEvent(const SseEvent& ev) override {
        PluginRequestData& d = *st.data;
        const std::size_t end = d.parser.eventEnd();
        if (f.failure_) {
          // A fail-closed plugin failed: nothing after the failed event goes out.
        } else if (d.stream_off) {
          d.out.append(bytes.substr(cut, end - cut));
        } else {
          std::string_view raw = bytes.substr(cut, end - cut);
          if (!d.pending.empty()) {  // the event began in an earlier read: it goes out whole, or rewritten whole
            d.pending.append(raw);
            d.joined.swap(d.pending);
            d.pending.clear();
            raw = d.joined;
          }
          changed = f.processEvent(ctx, st, ev, raw) || changed;
        }
        cut = end;
      }
    } sink(*this, ctx, st, bytes, cut, changed);
    if (!d.parser.feed(bytes, sink)) {
      // An event over the parser's bound: relay the rest untouched.
      d.stream_off = true;
      d.out.append(d.pending).append(bytes.substr(cut));
      d.pending.clear();
      data.replace(d.out);
      return;
    }
    if (cut < bytes.size()) {
      d.pending.append(bytes.substr(cut));  // an unfinished event waits for the rest
      changed = true;
    }
    if (data.last() && !d.pending.empty()) {
      d.out.append(d.pending);
      d.pending.clear();
    }
    if (failure_) {
      d.pending.clear();
      data.replace(d.out);
      data.fail(std::move(*failure_));
      failure_.reset();
      return;
    }
    if (changed) data.replace(d.out);
  }

  void onComplete(RequestContext& ctx) override {
    PluginState& st = state(ctx);
    // The hinted headers live in this request's data, which goes back to the pool.
    if (st.data && ctx.headers == &st.data->hinted) ctx.headers = st.data->hinted.base;
    if (!(st.phases & kPluginComplete)) return;
    forEach(st, kPluginComplete, [&](PluginInstance& in) {
      sync_view_.begin(&ctx, kPluginComplete, nullptr);
      callSync(sync_view_, in, [&](PluginRuntime&, lua_State* t, int&) { PluginInstance::pushCompletion(t, ctx); });
    });
  }

 private:
  // The plugins that apply: by path (precomputed), model, tenant and key (computed once
  // per model, tenant and key seen, then looked up), and headers (checked per request,
  // for the plugins that have header matchers).
  void select(RequestContext& ctx, PluginState& st) {
    PluginBits bits = by_endpoint_[static_cast<std::size_t>(ctx.endpoint) % kEndpoints];
    bits &= cached(model_bits_, ctx.model, [&](const PluginConfig& p) {
      return p.supports.models.empty() || (ctx.model && anyGlob(p.supports.models, ctx.model->name));
    });
    if (tenant_matchers_)
      bits &= cached(tenant_bits_, ctx.principal.tenant, [&](const PluginConfig& p) {
        return p.supports.tenants.empty() || (ctx.principal.tenant && listed(p.supports.tenants, ctx.principal.tenant->name));
      });
    if (key_matchers_)
      bits &= cached(key_bits_, ctx.principal.key, [&](const PluginConfig& p) {
        return p.supports.keys.empty() || (ctx.principal.key && listed(p.supports.keys, ctx.principal.key->name));
      });
    if ((bits & with_headers_).any())
      for (std::size_t i = 0; i < instances_.size(); ++i)
        if (bits.test(i) && with_headers_.test(i) && !headersMatch(instances_[i]->config(), ctx)) bits.reset(i);
    // A canary version runs instead of its stable plugin for its share of requests.
    for (const PluginSet::CanaryPair& p : set_->canaries()) {
      const bool has_stable = p.stable != static_cast<std::size_t>(-1);
      if (!bits.test(p.canary) && !(has_stable && bits.test(p.stable))) continue;
      if (PluginSet::takesCanary(instances_[p.canary]->config(), ctx)) {
        if (has_stable) bits.reset(p.stable);
      } else {
        bits.reset(p.canary);
      }
    }
    if (bits.none()) return;
    st.selected = bits;
    for (std::size_t i = 0; i < instances_.size(); ++i)
      if (bits.test(i)) st.phases |= instances_[i]->config().phases;
    if (spare_.empty()) {
      st.data = std::make_unique<PluginRequestData>();
    } else {
      st.data = std::move(spare_.back());
      spare_.pop_back();
    }
    st.data->reset(ctx.body);
    st.spare = &spare_;
  }

  template <class Key, class Match>
  PluginBits cached(std::unordered_map<const Key*, PluginBits>& cache, const Key* key, Match&& match) {
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    PluginBits bits;
    for (std::size_t i = 0; i < instances_.size(); ++i)
      if (match(instances_[i]->config())) bits.set(i);
    return cache.emplace(key, bits).first->second;
  }

  static bool headersMatch(const PluginConfig& p, const RequestContext& ctx) {
    if (!ctx.headers) return false;
    for (const auto& [name, values] : p.supports.headers) {
      const std::string_view v = ctx.headers->get(name);
      bool hit = false;
      for (const auto& want : values) hit = hit || (want == "*" ? !v.empty() : v == want);
      if (!hit) return false;
    }
    return true;
  }

  template <class Fn>
  void forEach(PluginState& st, std::uint8_t phase, Fn&& fn) {
    for (std::size_t i = 0; i < instances_.size(); ++i)
      if (st.selected.test(i) && (instances_[i]->config().phases & phase)) fn(*instances_[i]);
  }

  // A call that must end within one slice (response phases): run, and a call that is
  // still running when its slice ends is abandoned.
  template <class Push>
  PluginOutcome callSync(PluginCallView& view, PluginInstance& in, Push&& push) {
    const std::uint8_t phase = view.phase;
    if (in.breakerOpen(std::chrono::steady_clock::now())) {
      in.countSkipped(phase);
      return PluginOutcome::BreakerOpen;
    }
    std::shared_ptr<PluginRuntime> rt = in.runtime();
    if (!rt) {
      in.countUnavailable(phase);
      return PluginOutcome::Error;
    }
    LuaCall& call = sync_call_;
    int ref = kLuaNoRef;
    event_ok_ = true;
    lua_State* t = in.prepare(*rt, call, view);
    push(*rt, t, ref);
    if (const LuaStep s = in.run(*rt, call, view); s == LuaStep::Yielded || s == LuaStep::Waiting) {
      call.failure = LuaFailure::Slice;  // (no wait is possible here: tahua.kv.get refuses these phases)
      rt->vm.markBroken();
    }
    const PluginOutcome o = in.finish(*rt, call, view, ref);
    if (o == PluginOutcome::Ok && phase == kPluginStreamEvent) {
      event_ok_ = PluginInstance::readEventResult(call, verdict_, state_replacement_);
    }
    rt->vm.release(call);
    return o;
  }

  // One event through every stream-event plugin, in order (each maps an event to none,
  // itself, or others); the result appended to d.out. True when anything changed.
  bool processEvent(RequestContext& ctx, PluginState& st, const SseEvent& ev, std::string_view raw) {
    PluginRequestData& d = *st.data;
    d.events.clear();
    d.events.push_back(OutEvent{raw, std::string(ev.event), std::string(ev.data)});
    const std::uint32_t index = d.event_index++;
    bool changed = false;
    forEach(st, kPluginStreamEvent, [&](PluginInstance& in) {
      if (d.stream_off) return;
      d.next_events.clear();
      for (OutEvent& e : d.events) {
        sync_view_.begin(&ctx, kPluginStreamEvent, nullptr);
        const PluginOutcome o = callSync(sync_view_, in, [&](PluginRuntime&, lua_State* t, int&) {
          PluginInstance::pushEvent(t, e.event, e.data, index);
        });
        if (o == PluginOutcome::Ok && !event_ok_) {
          // An answer the API does not define: the plugin's failure.
          log::warn("plugin answer not understood: on_stream_event returns nil, a boolean, a string or a list of events",
                    {{"plugin", in.config().id}, {"request_id", ctx.request_id}});
        }
        if (o != PluginOutcome::Ok || !event_ok_) {
          if (in.config().fail_closed) {
            d.stream_off = true;
            failure_ = Error{ErrorKind::PluginFailed, "The stream could not be processed: plugin " + in.config().id + " failed."};
            return;
          }
          d.next_events.push_back(std::move(e));
          continue;
        }
        switch (verdict_) {
          case PluginInstance::EventVerdict::Keep: d.next_events.push_back(std::move(e)); break;
          case PluginInstance::EventVerdict::Drop: changed = true; break;
          case PluginInstance::EventVerdict::Replace:
            changed = true;
            for (auto& [name, data] : state_replacement_)
              d.next_events.push_back(OutEvent{{}, name.empty() ? e.event : std::move(name), std::move(data)});
            break;
        }
      }
      std::swap(d.events, d.next_events);
    });
    if (d.stream_off) return true;  // the stream ends here with the plugin's error
    for (const OutEvent& e : d.events) {
      if (!e.raw.empty()) d.out.append(e.raw);
      else encodeEvent(d.out, e.event, e.data);
    }
    return changed;
  }

  FilterStatus runRequest(RequestContext& ctx, PluginState& st) {
    PluginRequestData& d = *st.data;
    for (; st.next < instances_.size(); ++st.next) {
      if (!st.selected.test(st.next)) continue;
      PluginInstance& in = *instances_[st.next];
      if (!(in.config().phases & kPluginRequest)) continue;
      if (in.breakerOpen(std::chrono::steady_clock::now())) {
        in.countSkipped(kPluginRequest);
        if (in.config().fail_closed) return refuse(ctx, in);
        continue;
      }
      d.rt = in.runtime();
      if (!d.rt) {
        in.countUnavailable(kPluginRequest);
        if (in.config().fail_closed) return refuse(ctx, in);
        continue;
      }
      d.effects.clear();
      d.view.begin(&ctx, kPluginRequest, &d.effects);
      d.view.body = &d.body;
      lua_State* t = in.prepare(*d.rt, d.call, d.view);
      in.pushView(*d.rt, t, d.view, d.handle_ref);
      if (const LuaStep step = in.run(*d.rt, d.call, d.view); step == LuaStep::Yielded || step == LuaStep::Waiting) {
        continueLater(ctx, st, in, step);
        return FilterStatus::Pause;
      }
      if (FilterStatus s = endRequestCall(ctx, st, in); s != FilterStatus::Continue) return s;
    }
    if (d.body_changed) {
      // The limits, the token estimate and the upstream see the changed body.
      ctx.body = d.body.serialize();
      auto inspected = inspectRequest(ctx.body, ctx.config->server.max_json_depth);
      if (auto* facts = std::get_if<RequestFacts>(&inspected)) ctx.facts = std::move(*facts);
      d.body_changed = false;
    }
    return FilterStatus::Continue;
  }

  // The call used up its first slice, or waits for the store: it goes on through the set
  // (the plugin thread, the store), and the request here when it ends.
  void continueLater(RequestContext& ctx, PluginState& st, PluginInstance& in, LuaStep step) {
    PluginRequestData& d = *st.data;
    d.in_flight = true;
    set_->continueCall(in, d.rt, d.call, d.view, step, [this, &ctx] {
      PluginState& st = state(ctx);
      st.data->in_flight = false;
      FilterStatus s = endRequestCall(ctx, st, *instances_[st.next]);
      if (s == FilterStatus::Continue) {
        ++st.next;
        s = runRequest(ctx, st);
        if (s == FilterStatus::Pause) return;
      }
      ctx.resumer->resume(s);
    });
  }

  FilterStatus endRequestCall(RequestContext& ctx, PluginState& st, PluginInstance& in) {
    PluginRequestData& d = *st.data;
    const PluginOutcome o = in.finish(*d.rt, d.call, d.view, d.handle_ref);
    d.handle_ref = kLuaNoRef;
    d.rt->vm.release(d.call);
    d.rt.reset();
    if (o != PluginOutcome::Ok) return in.config().fail_closed ? refuse(ctx, in) : FilterStatus::Continue;
    if (d.effects.denied) {
      Error e{ErrorKind::PluginDenied, std::move(d.effects.deny_message)};
      e.plugin_status = d.effects.deny_status;
      e.plugin_code = std::move(d.effects.deny_code);
      ctx.fail(std::move(e));
      return FilterStatus::Stop;
    }
    for (auto& h : d.effects.set_headers) d.upstream_headers.push_back(std::move(h));
    if (d.body.apply(d.effects)) d.body_changed = true;
    if (!d.effects.pin_version.empty() && ctx.headers) {
      // The session drops ctx.headers (sets it null) once the response starts, which is
      // also when the hint stops mattering; until then the balancer reads through it.
      if (ctx.headers != &d.hinted) d.hinted.base = ctx.headers;
      d.hinted.version = std::move(d.effects.pin_version);
      ctx.headers = &d.hinted;
    }
    return FilterStatus::Continue;
  }

  static FilterStatus refuse(RequestContext& ctx, const PluginInstance& in) {
    ctx.fail(Error{ErrorKind::PluginFailed, "The request could not be processed: plugin " + in.config().id + " failed."});
    return FilterStatus::Stop;
  }

  ConfigPtr config_;
  std::shared_ptr<PluginSet> set_;
  // Per-request data of requests that ended, for the next ones (declared after the set:
  // a State may hand its data back while the filter is destroyed).
  std::vector<std::unique_ptr<PluginRequestData>> spare_;
  const std::vector<std::unique_ptr<PluginInstance>>& instances_;
  std::array<PluginBits, kEndpoints> by_endpoint_{};
  PluginBits with_headers_;
  bool tenant_matchers_ = false;
  bool key_matchers_ = false;
  bool any_stream_ = false;
  std::unordered_map<const ModelConfig*, PluginBits> model_bits_;
  std::unordered_map<const TenantConfig*, PluginBits> tenant_bits_;
  std::unordered_map<const ApiKeyConfig*, PluginBits> key_bits_;
  // Synchronous calls run one at a time on the worker: their scratch is the filter's.
  LuaCall sync_call_;
  PluginCallView sync_view_;
  bool event_ok_ = true;
  PluginInstance::EventVerdict verdict_ = PluginInstance::EventVerdict::Keep;
  std::vector<std::pair<std::string, std::string>> state_replacement_;
  std::optional<Error> failure_;
};

}  // namespace

std::unique_ptr<Filter> makePluginFilter(ConfigPtr config, std::shared_ptr<PluginSet> plugins) {
  return std::make_unique<PluginFilter>(std::move(config), std::move(plugins));
}

}  // namespace tahua
