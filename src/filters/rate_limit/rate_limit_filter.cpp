#include "filters/rate_limit/rate_limit_filter.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>

#include <boost/container_hash/hash.hpp>

#include "limits/limit_plan.h"
#include "store/state_store.h"
#include "telemetry/metrics.h"
#include "tokens/token_estimator.h"

namespace tahua {
namespace {

using Unit = LimitUnit;
using CheckTemplate = PlannedLimit;
using Group = LimitPlan;

// "750ms", "1.5s", "6m0s", "2h3m0s" (the form OpenAI's x-ratelimit-reset-* use), with
// to_chars (no printf on the request path).
std::size_t formatReset(std::int64_t ms, char* out, std::size_t size) {
  char* p = out;
  char* const end = out + size;
  auto num = [&](std::int64_t v) { p = std::to_chars(p, end, v).ptr; };
  auto lit = [&](std::string_view s) {
    for (char c : s)
      if (p < end) *p++ = c;
  };
  ms = std::max<std::int64_t>(ms, 0);
  if (ms < 1000) {
    num(ms);
    lit("ms");
  } else if (ms < 60'000) {
    num(ms / 1000);
    if (const std::int64_t frac = ms % 1000) {
      char digits[3] = {static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10), static_cast<char>('0' + frac % 10)};
      std::size_t n = 3;
      while (n > 0 && digits[n - 1] == '0') --n;
      lit(".");
      lit(std::string_view(digits, n));
    }
    lit("s");
  } else {
    const std::int64_t s = ms / 1000;
    if (s >= 3600) {
      num(s / 3600);
      lit("h");
    }
    num(s / 60 % (s >= 3600 ? 60 : 1'000'000'000));
    lit("m");
    num(s % 60);
    lit("s");
  }
  return static_cast<std::size_t>(p - out);
}

// A header value kept in the request's State (headers are views).
struct Value {
  char text[24];
  std::uint8_t size = 0;
  std::string_view view() const { return {text, size}; }
  void number(std::int64_t v) { size = static_cast<std::uint8_t>(std::to_chars(text, text + sizeof text, v).ptr - text); }
  void copy(std::string_view s) {  // (a limit's text, formatted when its plan was made)
    size = static_cast<std::uint8_t>(std::min(s.size(), sizeof text));
    std::memcpy(text, s.data(), size);
  }
  void reset(std::int64_t ms) { size = static_cast<std::uint8_t>(formatReset(ms, text, sizeof text)); }
};

constexpr std::size_t kFixedGroups = 4;   // tenant, key, tenant x model, model
constexpr std::size_t kMaxGroups = 8;     // and up to four matching rate-limit policies

struct RateLimitState {
  std::array<const Group*, kMaxGroups> groups{};  // the request's limits, as admitted
  // A jwt caller's own limits (in the key's place, groups[1]): kept alive for the
  // request, whatever the worker's bounded table of them drops meanwhile.
  std::shared_ptr<const Group> subject;
  SteadyTime asked{};  // when the store was asked (the decision's latency)
  bool admitted = false;
  bool deciding = false;       // inside store.admit: an answer now is synchronous
  bool answered = false;       // the store answered while `deciding`
  FilterStatus answer = FilterStatus::Continue;
  std::int64_t reserved_tokens = 0;
  std::int64_t reserved_micro_usd = 0;
  // Per group: the store's time of its admission (calibration goes to the quota period
  // charged) and whether the store decided without its shared backend. A fallback
  // model's limits are admitted later than the caller's own.
  std::array<std::int64_t, kMaxGroups> admitted_at{};
  std::uint8_t admitted_locally = 0;  // bit g
  const ModelConfig* model = nullptr;  // the model the groups were chosen for
  std::uint8_t checked = 0;       // templates sent to the store, in group order (at most kMaxChecks)
  // A fallback's admission (onReselect): the groups for the new model, which of them are
  // new to the request, and which of them end streams over budget.
  std::array<const LimitPlan*, kMaxGroups> next_groups{};
  std::uint8_t fresh = 0, fresh_checked = 0, next_ends = 0;
  bool has_requests = false, has_tokens = false;
  std::int64_t shown_requests = 0, shown_tokens = 0;  // the remaining the headers show
  bool final_refusal = false;  // waiting will not help soon: SDKs are told not to retry
  Value requests[3], tokens[3];  // limit, remaining, reset
  // Streams over budget (rate_limits.end_streams_over_budget, and per policy).
  std::uint8_t end_over_budget = 0;    // bit g: the token limits of groups[g] end a stream they cannot pay for
  std::int64_t reserved_completion = 0;
  std::int64_t stream_allowance = -1;  // output tokens the stream may produce (-1: not watched)
  std::int64_t streamed = 0;           // estimated so far
  const PlannedLimit* budget = nullptr;  // the limit that sets the allowance (named in the error)
  bool overran = false;
};

class RateLimitFilter final : public FilterWithState<RateLimitState> {
 private:
  // tahua_rate_limit_decisions_total{store} and the decision's time.
  void countDecision(const RateLimitState& st, const Admission& a) {
    const std::string_view store = a.local ? (shared_store_ ? "local_fallback" : "memory") : shared_store_ ? "redis" : "memory";
    auto it = metrics_.limit_decisions.find(store);
    if (it == metrics_.limit_decisions.end()) it = metrics_.limit_decisions.try_emplace(std::string(store)).first;
    it->second.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - st.asked).count());
  }
  bool shared_store_ = false;

 public:
  RateLimitFilter(const Config& config, TenantDirectoryPtr directory, StateStore& store, WorkerMetrics& metrics)
      : directory_(std::move(directory)), store_(store), metrics_(metrics) {
    for (const auto& t : directory_->tenants) {
      if (t.limits.any()) tenants_.emplace(&t, tenantLimits(t));
      for (const auto& [model, limits] : t.model_limits)
        if (const ModelConfig* m = config.findModel(model); m && limits.any())
          pairs_[&t].emplace_back(m, tenantModelLimits(t, model, limits));
    }
    for (const auto& k : directory_->keys)
      if (k.limits.any()) keys_.emplace(&k, keyLimits(k));
    for (const auto& t : directory_->tenants)
      for (const auto& [subject, limits] : t.subjects) own_subject_limits_.emplace(SubjectOf{&t, subject}, &limits);
    for (const auto& [model, limits] : config.rate_limits.models)
      if (const ModelConfig* m = config.findModel(model); m && limits.any())
        models_.emplace(m, modelLimits(model, limits));
    default_max_tokens_ = config.rate_limits.default_max_tokens;
    shared_store_ = config.store.type == StoreConfig::Type::Redis;
    policies_ = &config.rate_limits.policies;
    end_over_budget_ = config.rate_limits.end_streams_over_budget;
    wants_data_ = end_over_budget_;
    for (const auto& pol : *policies_) wants_data_ = wants_data_ || pol.end_streams_over_budget;
  }
  bool wantsResponseData() const override { return wants_data_; }
  std::string_view name() const override { return "rate_limit"; }

  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    if (!ctx.model || ctx.endpoint == Endpoint::CountTokens) return FilterStatus::Continue;
    RateLimitState& st = state(ctx);
    if (!ctx.principal.key && ctx.principal.caller) st.subject = subjectGroup(ctx);
    st.groups = {find(tenants_, ctx.principal.tenant), st.subject ? st.subject.get() : find(keys_, ctx.principal.key), pair(ctx),
                 find(models_, ctx.model)};
    std::size_t next = kFixedGroups;
    if (end_over_budget_) st.end_over_budget = (1u << kFixedGroups) - 1;
    for (std::size_t i = 0; i < policies_->size() && next < kMaxGroups; ++i)
      if (const Group* g = policyGroup(i, ctx)) {
        if ((*policies_)[i].end_streams_over_budget) st.end_over_budget |= static_cast<std::uint8_t>(1u << next);
        st.groups[next++] = g;
      }
    bool any = false;
    for (const Group* g : st.groups) any = any || g;
    if (!any) return FilterStatus::Continue;
    st.model = ctx.model;

    // The estimate every token limit reserves; calibrated in onComplete.
    // Files and batches cost no tokens here (a batch's are metered when it ends); MCP
    // calls none at all (their request limits count them).
    const std::int64_t prompt = fileEndpoint(ctx.endpoint) || mcpEndpoint(ctx.endpoint) ? 0 : static_cast<std::int64_t>((ctx.body.size() + 3) / 4);
    const std::int64_t completion =
        oneShotEndpoint(ctx.endpoint) ? 0 : ctx.facts.max_tokens > 0 ? ctx.facts.max_tokens : default_max_tokens_;
    st.reserved_tokens = prompt + completion;
    st.reserved_completion = completion;
    st.reserved_micro_usd = microUsd(ctx.model, prompt, completion);
    // Images are priced each: the request's `n` of them (1 by default) is reserved.
    if (ctx.endpoint == Endpoint::ImagesGenerations && ctx.model && ctx.model->pricing.per_image > 0)
      st.reserved_micro_usd += static_cast<std::int64_t>(
          std::ceil(static_cast<double>(std::max<std::int64_t>(ctx.facts.n, 1)) * ctx.model->pricing.per_image * 1e6));

    auto& checks = checks_;
    std::size_t n = 0;
    for (const Group* g : st.groups)
      if (g)
        for (const CheckTemplate& t : *g) {
          if (n == checks.size()) break;
          checks[n++] = check(t, st);
        }
    st.checked = static_cast<std::uint8_t>(n);
    st.deciding = true;
    st.asked = std::chrono::steady_clock::now();
    store_.admit(std::span<const LimitCheck>(checks.data(), n), [this, &ctx](const Admission& a) { decided(ctx, a); });
    st.deciding = false;
    if (st.answered) return st.answer;
    return FilterStatus::Pause;  // the store resumes the request through decided()
  }

  void onResponseHeaders(RequestContext& ctx) override {
    RateLimitState& st = state(ctx);
    if (!ctx.response_headers) return;
    auto& h = *ctx.response_headers;
    // OpenAI's and Anthropic's SDKs retry a 429 unless told not to.
    if (st.final_refusal) h.emplace_back("x-should-retry", "false");
    if (!st.has_requests && !st.has_tokens) return;
    // The provider's limits are the gateway's account's, not this caller's.
    std::erase_if(h, [](const auto& kv) { return kv.first.size() > 12 && iequalsPrefix(kv.first, "x-ratelimit-"); });
    if (st.has_requests) {
      h.emplace_back("x-ratelimit-limit-requests", st.requests[0].view());
      h.emplace_back("x-ratelimit-remaining-requests", st.requests[1].view());
      h.emplace_back("x-ratelimit-reset-requests", st.requests[2].view());
    }
    if (st.has_tokens) {
      h.emplace_back("x-ratelimit-limit-tokens", st.tokens[0].view());
      h.emplace_back("x-ratelimit-remaining-tokens", st.tokens[1].view());
      h.emplace_back("x-ratelimit-reset-tokens", st.tokens[2].view());
    }
  }

  void onComplete(RequestContext& ctx) override {
    RateLimitState& st = state(ctx);
    if (!st.admitted) return;
    st.admitted = false;
    // What the request really cost: the usage the upstream reported; nothing when no
    // answer came (the provider does not bill a failed call: a refusal, an error before
    // the answer's first byte, a stream whose upstream broke after its head, the
    // gateway's own fallback answer); the reservation when an answer came without usage
    // (it cannot be known better). The usage record bills the same (usage_filter.cpp).
    std::int64_t tokens = st.reserved_tokens, micro_usd = st.reserved_micro_usd;
    const Usage& u = ctx.usage;
    // (Zero is an answer too: a cache hit that counts as zero tokens.)
    if (u.metered()) {
      const std::int64_t p = std::max<std::int64_t>(u.prompt_tokens, 0), c = std::max<std::int64_t>(u.completion_tokens, 0);
      tokens = p + c;
      const double cost = costUsd(ctx.model, u);
      micro_usd = cost > 0 ? static_cast<std::int64_t>(std::ceil(cost * 1e6)) : 0;
    } else if (st.overran) {
      // Ended over budget (the upstream was cancelled, so it reported nothing): what it
      // sent, as estimated on the way.
      const std::int64_t prompt = st.reserved_tokens - st.reserved_completion;
      tokens = prompt + st.streamed;
      micro_usd = microUsd(ctx.model, prompt, st.streamed);
    } else if (ctx.status < 200 || ctx.status >= 300 || ctx.nothingBilled()) {
      tokens = 0;
      micro_usd = 0;
    }
    std::size_t seen = 0;  // only what was admitted (a request over kMaxChecks limits sent the first ones)
    for (std::size_t g = 0; g < kMaxGroups; ++g)
      if (st.groups[g])
        for (const CheckTemplate& t : *st.groups[g]) {
          if (seen++ >= st.checked) return;
          if (t.unit == Unit::Requests) continue;
          const std::int64_t delta = t.unit == Unit::Tokens ? tokens - st.reserved_tokens : micro_usd - st.reserved_micro_usd;
          if (delta != 0) store_.adjust(check(t, st), st.admitted_at[g], delta, st.admitted_locally >> g & 1);
        }
  }

  // A failed attempt moved the request to a fallback model: that model's limits (its
  // own, the tenant's for it, the policies matching it) are admitted now, all or
  // nothing; the caller's limits stay as admitted. The groups the request leaves get
  // what a failed call costs (their token and budget reservations back; the request
  // counts stay: the attempt did reach that model).
  FilterStatus onReselect(RequestContext& ctx) override {
    RateLimitState& st = state(ctx);
    if (!st.admitted) return onUpstreamSelect(ctx);  // the first model had no limits: the fallback may
    if (!ctx.model || ctx.model == st.model) return FilterStatus::Continue;
    st.model = ctx.model;
    std::array<const Group*, kMaxGroups> next{st.groups[0], st.groups[1], pair(ctx), find(models_, ctx.model)};
    std::uint8_t ends = end_over_budget_ ? (1u << kFixedGroups) - 1 : 0;
    std::size_t n = kFixedGroups;
    for (std::size_t i = 0; i < policies_->size() && n < kMaxGroups; ++i)
      if (const Group* g = policyGroup(i, ctx)) {
        if ((*policies_)[i].end_streams_over_budget) ends |= static_cast<std::uint8_t>(1u << n);
        next[n++] = g;
      }
    st.next_groups = next;
    st.next_ends = ends;
    st.fresh = 0;
    auto& checks = checks_;
    std::size_t c = 0;
    for (std::size_t g = 0; g < kMaxGroups; ++g) {
      if (!next[g] || std::find(st.groups.begin(), st.groups.end(), next[g]) != st.groups.end()) continue;
      st.fresh |= static_cast<std::uint8_t>(1u << g);
      for (const CheckTemplate& t : *next[g])
        if (c < checks.size()) checks[c++] = check(t, st);
    }
    if (c == 0) {
      moveTo(st, Admission{});
      return FilterStatus::Continue;
    }
    st.fresh_checked = static_cast<std::uint8_t>(c);
    st.deciding = true;
    st.answered = false;
    store_.admit(std::span<const LimitCheck>(checks.data(), c), [this, &ctx](const Admission& a) { readmitted(ctx, a); });
    st.deciding = false;
    if (st.answered) return st.answer;
    return FilterStatus::Pause;
  }

 private:
  template <class Map, class K>
  static const Group* find(const Map& m, const K* key) {
    if (!key) return nullptr;
    auto it = m.find(key);
    return it == m.end() ? nullptr : &it->second;
  }
  // A jwt caller's limits: its own (tenants[].subjects), else its tenant's per-subject
  // default (subject_limits); null when neither has any. Made on first use and kept in a
  // bounded table (subjects are unbounded: over kMaxSubjects it starts afresh).
  std::shared_ptr<const Group> subjectGroup(const RequestContext& ctx) {
    const TenantConfig* t = ctx.principal.tenant;
    const CallerIdentity& c = *ctx.principal.caller;
    if (!t) return nullptr;
    auto own = own_subject_limits_.find(SubjectOf{t, c.subject});
    const LimitSet& limits = own != own_subject_limits_.end() ? *own->second : t->subject_limits;
    if (!limits.any()) return nullptr;
    std::string id = t->name + '\n' + c.issuer + '\n' + c.subject;
    auto it = subject_groups_.find(id);
    if (it != subject_groups_.end()) return it->second;
    if (subject_groups_.size() >= kMaxSubjects) subject_groups_.clear();
    auto g = std::make_shared<const Group>(subjectLimits(*t, c.issuer, c.subject, limits));
    subject_groups_.emplace(std::move(id), g);
    return g;
  }
  static constexpr std::size_t kMaxSubjects = 10'000;
  struct SubjectOf {
    const TenantConfig* tenant;
    std::string_view subject;
    bool operator==(const SubjectOf&) const = default;
  };
  struct SubjectOfHash {
    std::size_t operator()(const SubjectOf& s) const noexcept {
      return std::hash<std::string_view>{}(s.subject) ^ std::hash<const void*>{}(s.tenant);
    }
  };
  std::unordered_map<SubjectOf, const LimitSet*, SubjectOfHash> own_subject_limits_;
  std::unordered_map<std::string, std::shared_ptr<const Group>> subject_groups_;

  const Group* pair(const RequestContext& ctx) const {
    auto it = ctx.principal.tenant ? pairs_.find(ctx.principal.tenant) : pairs_.end();
    if (it == pairs_.end()) return nullptr;
    for (const auto& [model, group] : it->second)
      if (model == ctx.model) return &group;
    return nullptr;
  }

  // The limits a policy puts on this request (its rule for the client type, within the
  // rule's rollout, else its default), counted per key, tenant or over everyone; null
  // when the policy does not match. Groups are made on first use and kept (per worker).
  const Group* policyGroup(std::size_t index, const RequestContext& ctx) {
    const RateLimitPolicyConfig& pol = (*policies_)[index];
    auto listed = [](const std::vector<std::string>& list, std::string_view name) {
      return std::find(list.begin(), list.end(), name) != list.end();
    };
    if (!pol.models.empty() && !listed(pol.models, ctx.model->name) && !listed(pol.models, ctx.facts.model)) return nullptr;
    if (!pol.tenants.empty() && (!ctx.principal.tenant || !listed(pol.tenants, ctx.principal.tenant->name))) return nullptr;
    if (!pol.keys.empty() && (!ctx.principal.key || !listed(pol.keys, ctx.principal.key->name))) return nullptr;
    if (!pol.routes.empty() && !listed(pol.routes, ctx.route_name)) return nullptr;
    const std::string_view type = ctx.headers ? ctx.headers->get(pol.client_header) : std::string_view{};
    std::size_t rule = pol.rules.size();  // the default
    for (std::size_t r = 0; r < pol.rules.size() && !type.empty(); ++r) {
      if (pol.rules[r].client_type != type) continue;
      const RateLimitRule& rl = pol.rules[r];
      bool in = rl.rollout_percent >= 100;
      if (!in) {
        // The same caller (or trace) always lands on the same side of the rollout.
        std::string_view source = !rl.rollout_header.empty() && ctx.headers ? ctx.headers->get(rl.rollout_header)
                                  : ctx.principal.key                       ? std::string_view(ctx.principal.key->name)
                                  : ctx.principal.tenant                    ? std::string_view(ctx.principal.tenant->name)
                                                                            : std::string_view{};
        in = !source.empty() &&
             static_cast<double>(boost::hash_range(source.begin(), source.end()) % 10000) < rl.rollout_percent * 100;
      }
      if (in) rule = r;
      break;
    }
    const LimitSet& limits = rule < pol.rules.size() ? pol.rules[rule].limits : pol.limits;
    if (!limits.any()) return nullptr;
    const void* who = nullptr;
    using Per = RateLimitPolicyConfig::Per;
    if (pol.per == Per::Key && ctx.principal.key) who = ctx.principal.key;
    else if (pol.per != Per::All && ctx.principal.tenant) who = ctx.principal.tenant;
    const PolicyKey key{index, rule, who};
    auto it = policy_groups_.find(key);
    if (it != policy_groups_.end()) return &it->second;
    const std::string rule_name = rule < pol.rules.size() ? pol.rules[rule].client_type : "default";
    std::string prefix;
    if (who && who == ctx.principal.key)
      prefix = "tahua:{t:" + ctx.principal.key->tenant + "}:policy:" + pol.name + ":" + rule_name + ":key:" + ctx.principal.key->name;
    else if (who)
      prefix = "tahua:{t:" + ctx.principal.tenant->name + "}:policy:" + pol.name + ":" + rule_name;
    else
      prefix = "tahua:{p:" + pol.name + "}:" + rule_name;
    return &policy_groups_.emplace(key, planLimits(limits, prefix, "policy")).first->second;
  }

  static bool iequalsPrefix(std::string_view s, std::string_view prefix) {
    for (std::size_t i = 0; i < prefix.size(); ++i)
      if ((s[i] | 0x20) != prefix[i]) return false;
    return true;
  }

  static std::int64_t microUsd(const ModelConfig* model, std::int64_t prompt, std::int64_t completion) {
    if (!model || !model->pricing.set) return 0;
    // USD per million tokens = micro-USD per token.
    return static_cast<std::int64_t>(
        std::ceil(static_cast<double>(prompt) * model->pricing.input + static_cast<double>(completion) * model->pricing.output));
  }

  static LimitCheck check(const CheckTemplate& t, const RateLimitState& st) {
    LimitCheck c{t.key, t.spec, 1, &t.store_hint};
    c.cost = t.unit == Unit::Requests ? 1 : t.unit == Unit::Tokens ? st.reserved_tokens : st.reserved_micro_usd;
    return c;
  }

  using Groups = std::array<const Group*, kMaxGroups>;

  // Check `index` of an admission over the groups of `groups` in `mask`, in order.
  static const CheckTemplate* templateIn(const Groups& groups, std::uint8_t mask, std::size_t index) {
    for (std::size_t g = 0; g < kMaxGroups; ++g)
      if (groups[g] && (mask >> g & 1)) {
        if (index < groups[g]->size()) return &(*groups[g])[index];
        index -= groups[g]->size();
      }
    return nullptr;
  }
  static std::size_t templates(const Groups& groups) {
    std::size_t n = 0;
    for (const Group* g : groups) n += g ? g->size() : 0;
    return std::min(n, Admission::kMaxChecks);
  }

  // The tightest request and token limits of an admission, for the headers (a fallback's
  // admission replaces them only where it is tighter).
  static void noteHeaders(RateLimitState& st, const Groups& groups, std::uint8_t mask, const Admission& a) {
    const LimitDecision* req = nullptr;
    const LimitDecision* tok = nullptr;
    const CheckTemplate *req_t = nullptr, *tok_t = nullptr;
    for (std::size_t i = 0; i < a.count; ++i) {
      const CheckTemplate* t = templateIn(groups, mask, i);
      if (!t || t->spec.kind == LimitKind::Quota) continue;
      const LimitDecision& d = a.decisions[i];
      if (t->unit == Unit::Requests && (!req || d.remaining < req->remaining)) req = &d, req_t = t;
      if (t->unit == Unit::Tokens && (!tok || d.remaining < tok->remaining)) tok = &d, tok_t = t;
    }
    if (req && (!st.has_requests || req->remaining < st.shown_requests)) {
      st.has_requests = true;
      st.shown_requests = req->remaining;
      st.requests[0].copy(req_t->limit_text);
      st.requests[1].number(req->remaining);
      st.requests[2].reset(req->reset_ms);
    }
    if (tok && (!st.has_tokens || tok->remaining < st.shown_tokens)) {
      st.has_tokens = true;
      st.shown_tokens = tok->remaining;
      st.tokens[0].copy(tok_t->limit_text);
      st.tokens[1].number(tok->remaining);
      st.tokens[2].reset(tok->reset_ms);
    }
  }

  // The store's answer (now, or later on this worker's thread).
  void decided(RequestContext& ctx, const Admission& a) {
    RateLimitState& st = state(ctx);
    countDecision(st, a);
    noteHeaders(st, st.groups, 0xFF, a);
    FilterStatus status = FilterStatus::Continue;
    if (a.allowed) {
      st.admitted = true;
      st.admitted_at.fill(a.at_ms);
      st.admitted_locally = a.local ? 0xFF : 0;
      if (st.end_over_budget && ctx.facts.stream) watchStream(st, st.groups, 0xFF, a);
    } else {
      refuse(ctx, st, *templateIn(st.groups, 0xFF, a.denied), a.decisions[a.denied]);
      status = FilterStatus::Stop;
    }
    answer(ctx, st, status);
  }

  void answer(RequestContext& ctx, RateLimitState& st, FilterStatus status) {
    if (st.deciding) {
      st.answered = true;
      st.answer = status;
    } else {
      ctx.resumer->resume(status);
    }
  }

  // The fallback model's limits were decided (onReselect).
  void readmitted(RequestContext& ctx, const Admission& a) {
    RateLimitState& st = state(ctx);
    noteHeaders(st, st.next_groups, st.fresh, a);
    FilterStatus status = FilterStatus::Continue;
    if (a.allowed) {
      moveTo(st, a);
      if (st.end_over_budget && ctx.facts.stream) watchStream(st, st.groups, st.fresh, a);
    } else {
      // The request ends here; onComplete gives the groups it was admitted to what a
      // failed call costs.
      refuse(ctx, st, *templateIn(st.next_groups, st.fresh, a.denied), a.decisions[a.denied]);
      status = FilterStatus::Stop;
    }
    answer(ctx, st, status);
  }

  // The request now counts against st.next_groups: the groups it leaves get their token
  // and budget reservations back, the fresh ones carry `a`'s time and place.
  void moveTo(RateLimitState& st, const Admission& a) {
    std::size_t seen = 0;
    for (std::size_t g = 0; g < kMaxGroups; ++g) {
      if (!st.groups[g]) continue;
      const bool stays = std::find(st.next_groups.begin(), st.next_groups.end(), st.groups[g]) != st.next_groups.end();
      for (const CheckTemplate& t : *st.groups[g]) {
        if (seen++ >= st.checked) break;
        if (stays || t.unit == Unit::Requests) continue;
        const std::int64_t reserved = t.unit == Unit::Tokens ? st.reserved_tokens : st.reserved_micro_usd;
        if (reserved != 0) store_.adjust(check(t, st), st.admitted_at[g], -reserved, st.admitted_locally >> g & 1);
      }
    }
    std::array<std::int64_t, kMaxGroups> at{};
    std::uint8_t local = 0;
    for (std::size_t g = 0; g < kMaxGroups; ++g) {
      if (!st.next_groups[g]) continue;
      if (st.fresh >> g & 1) {
        at[g] = a.at_ms;
        if (a.local) local |= static_cast<std::uint8_t>(1u << g);
        continue;
      }
      const auto old = static_cast<std::size_t>(std::find(st.groups.begin(), st.groups.end(), st.next_groups[g]) - st.groups.begin());
      at[g] = st.admitted_at[old];
      if (st.admitted_locally >> old & 1) local |= static_cast<std::uint8_t>(1u << g);
    }
    st.groups = st.next_groups;
    st.end_over_budget = st.next_ends;
    st.admitted_at = at;
    st.admitted_locally = local;
    st.checked = static_cast<std::uint8_t>(templates(st.groups));
  }

  // What the stream may produce: for each token limit that ends streams, what it had left
  // after this request's reservation plus the completion part of that reservation.
  static void watchStream(RateLimitState& st, const Groups& groups, std::uint8_t mask, const Admission& a) {
    std::size_t i = 0;
    for (std::size_t g = 0; g < kMaxGroups; ++g) {
      if (!groups[g] || !(mask >> g & 1)) continue;
      for (const CheckTemplate& t : *groups[g]) {
        if (i >= a.count) return;
        if ((st.end_over_budget >> g & 1) && t.unit == Unit::Tokens) {
          const std::int64_t allowance = std::max<std::int64_t>(a.decisions[i].remaining, 0) + st.reserved_completion;
          if (st.stream_allowance < 0 || allowance < st.stream_allowance) {
            st.stream_allowance = allowance;
            st.budget = &t;
          }
        }
        ++i;
      }
    }
  }

  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    RateLimitState& st = state(ctx);
    if (st.stream_allowance < 0 || st.overran || data.aborted()) return;
    // A realtime session reports its usage as it goes (each response.done): that, not an
    // estimate of its frames (mostly base64 audio), is what it has used.
    if (ctx.endpoint == Endpoint::Realtime) st.streamed = std::max<std::int64_t>(ctx.usage.total_tokens, 0);
    else st.streamed += estimateStreamedTokens(data.bytes(), defaultTokenCounter());
    if (st.streamed <= st.stream_allowance) return;
    st.overran = true;
    const CheckTemplate& t = *st.budget;
    data.fail(Error{t.spec.kind == LimitKind::Quota ? ErrorKind::QuotaExceeded : ErrorKind::RateLimited,
                    "The stream was ended: its output passed the " + std::to_string(st.stream_allowance) + " tokens the " +
                        std::string(t.scope) + " limit " + std::string(t.limit) + " still allowed."});
    ++metrics_.streams_ended_over_budget;
  }

  void refuse(RequestContext& ctx, RateLimitState& st, const CheckTemplate& t, const LimitDecision& d) {
    auto key = std::pair<std::string_view, std::string_view>(t.scope, t.limit);
    if (auto it = metrics_.limit_rejections.find(key); it != metrics_.limit_rejections.end()) ++it->second;
    else metrics_.limit_rejections.emplace(std::pair<std::string, std::string>(t.scope, t.limit), 1);

    const std::int64_t requested = t.unit == Unit::Requests ? 1 : t.unit == Unit::Tokens ? st.reserved_tokens : st.reserved_micro_usd;
    auto amount = [&](std::int64_t v) {
      if (t.unit != Unit::MicroUsd) return std::to_string(v);
      char buf[32];
      std::snprintf(buf, sizeof buf, "$%.6f", static_cast<double>(v) / 1e6);
      return std::string(buf);
    };
    std::string what = std::string(t.limit);
    std::replace(what.begin(), what.end(), '_', ' ');
    // An MCP tool call is limited by the tool's name (its model is the server's target).
    const std::string_view tool = ctx.record_fields[static_cast<std::size_t>(RecordField::McpTool)];
    const std::string where = (tool.empty() ? " for model '" + ctx.model->name : " for tool '" + std::string(tool)) + "' on " + what + " (" +
                              std::string(t.scope) + " limit)";
    const bool quota = t.spec.kind == LimitKind::Quota;
    if (d.never || quota) st.final_refusal = true;
    if (d.never) {
      // Waiting cannot help: no Retry-After (a client would retry for ever).
      ctx.fail(Error{ErrorKind::LimitTooSmall, "Request too large" + where + ": Limit " + amount(t.spec.limit) + ", Requested " +
                                                   amount(requested) + ". Reduce the prompt or max_tokens."});
      return;
    }
    Error e{quota ? ErrorKind::QuotaExceeded : ErrorKind::RateLimited, ""};
    e.retry_after_seconds = static_cast<int>(std::min<std::int64_t>((d.retry_after_ms + 999) / 1000, 366LL * 24 * 3600));
    e.retry_after_seconds = std::max(e.retry_after_seconds, 1);
    char wait[24];
    const std::string in(wait, formatReset(d.retry_after_ms, wait, sizeof wait));
    if (e.kind == ErrorKind::QuotaExceeded)
      e.message = "Quota exceeded" + where + ": Limit " + amount(t.spec.limit) + ", Remaining " + amount(d.remaining) +
                  ", Requested " + amount(requested) + ". It resets in " + in + ".";
    else
      e.message = "Rate limit reached" + where + ": Limit " + amount(t.spec.limit) + ", Remaining " + amount(d.remaining) +
                  ", Requested " + amount(requested) + ". Please try again in " + in + ".";
    ctx.fail(std::move(e));
  }

  TenantDirectoryPtr directory_;  // the principals' records the maps below are keyed by
  StateStore& store_;
  WorkerMetrics& metrics_;
  std::unordered_map<const TenantConfig*, Group> tenants_;
  std::unordered_map<const ApiKeyConfig*, Group> keys_;
  std::unordered_map<const TenantConfig*, std::vector<std::pair<const ModelConfig*, Group>>> pairs_;
  std::unordered_map<const ModelConfig*, Group> models_;
  std::int64_t default_max_tokens_ = 1024;
  bool end_over_budget_ = false;  // rate_limits.end_streams_over_budget
  bool wants_data_ = false;       // it, or a policy's: only then do stream pieces come here
  const std::vector<RateLimitPolicyConfig>* policies_ = nullptr;  // the config's (the chain pins it)
  struct PolicyKey {
    std::size_t policy, rule;
    const void* who;
    bool operator==(const PolicyKey&) const = default;
  };
  struct PolicyKeyHash {
    std::size_t operator()(const PolicyKey& k) const noexcept {
      std::size_t h = k.policy * 1'000'003u ^ k.rule;
      boost::hash_combine(h, k.who);
      return h;
    }
  };
  std::unordered_map<PolicyKey, Group, PolicyKeyHash> policy_groups_;
  // The checks of the decision being asked for, built here rather than on the stack: 48
  // default-constructed checks per request were 400 instructions (callgrind). The store
  // reads them only during admit() (it copies what it keeps), and a worker asks one at a time.
  std::array<LimitCheck, Admission::kMaxChecks> checks_;
};

}  // namespace

bool rateLimitsConfigured(const Config& config, const TenantDirectory& directory) {
  if (!config.rate_limits.policies.empty()) return true;
  for (const auto& t : directory.tenants) {
    if (t.limits.any() || t.subject_limits.any()) return true;
    for (const auto& [s, l] : t.subjects)
      if (l.any()) return true;
    for (const auto& [m, l] : t.model_limits)
      if (l.any()) return true;
  }
  for (const auto& k : directory.keys)
    if (k.limits.any()) return true;
  for (const auto& [m, l] : config.rate_limits.models)
    if (l.any()) return true;
  return false;
}

std::unique_ptr<Filter> makeRateLimitFilter(const Config& config, TenantDirectoryPtr directory, StateStore& store,
                                            WorkerMetrics& metrics) {
  return std::make_unique<RateLimitFilter>(config, std::move(directory), store, metrics);
}

}  // namespace tahua
