#include "filters/cache/cache_filter.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cstdio>
#include <unordered_map>


#include "cache/response_cache.h"
#include "core/json_read.h"
#include "core/sha256.h"
#include "filters/cache/cache_key.h"
#include "filters/answer_capture.h"
#include "filters/cache/cached_answer_forms.h"
#include "filters/guardrails/policy_match.h"
#include "filters/worker_services.h"
#include "guardrails/rule_set.h"
#include "http/outbound_call.h"
#include "http/request_inspect.h"
#include "providers/embedding_call.h"
#include "providers/secret_scrubber.h"
#include "telemetry/metrics.h"

namespace tahua {
namespace {

namespace bj = boost::json;

enum class CacheStatus : std::uint8_t { None, Hit, Miss, Bypass, Refresh, Stale, SemanticHit };

std::string_view statusName(CacheStatus s) {
  switch (s) {
    case CacheStatus::Hit: return "hit";
    case CacheStatus::Miss: return "miss";
    case CacheStatus::Bypass: return "bypass";
    case CacheStatus::Refresh: return "refresh";
    case CacheStatus::Stale: return "stale";
    case CacheStatus::SemanticHit: return "semantic-hit";
    case CacheStatus::None: break;
  }
  return "";
}

struct CacheFilterState {
  CacheStatus status = CacheStatus::None;
  std::string key;
  bool keep = false;       // the answer is to be kept (a miss or a refresh)
  bool capturing = false;  // it is being captured
  AnswerCapture captured;
  std::string saved;  // digits of the tokens a hit saved (a record field's view)
  Usage saved_usage;  // what the kept answer cost when it was made
  std::shared_ptr<const CachedAnswer> stale;  // past its ttl: an answer only if every upstream fails
  // The semantic layer: the last user message's vector (kept with the answer on a miss),
  // the hash of everything else, the index it belongs to, a hit's similarity.
  std::vector<float> vector;
  std::string context;
  std::string index;
  std::string similarity;
  bool deciding = false;
  bool answered = false;
  FilterStatus answer = FilterStatus::Continue;
};

bool cacheableEndpoint(Endpoint e) {
  return e == Endpoint::ChatCompletions || e == Endpoint::Messages || e == Endpoint::Responses || e == Endpoint::Embeddings;
}

class CacheFilter final : public FilterWithState<CacheFilterState> {
 public:
  CacheFilter(ResponseCache& cache, WorkerMetrics& metrics, WorkerServices& services)
      : cache_(cache), metrics_(metrics), services_(services) {}
  std::string_view name() const override { return "cache"; }
  bool wantsResponseData() const override { return true; }

  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    if (!ctx.model || !ctx.model->cache.enabled || !cacheableEndpoint(ctx.endpoint)) return FilterStatus::Continue;
    CacheFilterState& st = state(ctx);
    const CachePolicy& policy = ctx.model->cache;
    // What the client asked of the cache.
    bool lookup = true, keep = true;
    if (ctx.headers) {
      const std::string_view control = ctx.headers->get("cache-control");
      const std::string_view ours = ctx.headers->get("x-tahua-cache");
      if (control.find("no-store") != std::string_view::npos || ours == "bypass") lookup = keep = false;
      else if (control.find("no-cache") != std::string_view::npos || ours == "refresh") lookup = false;
    }
    if (!lookup && !keep) return decide(ctx, st, CacheStatus::Bypass);
    // The body decides the rest: parsed once, for the policy and the key.
    if (jsonDeeperThan(ctx.body, ctx.config->server.max_json_depth)) return decide(ctx, st, CacheStatus::Bypass);
    boost::system::error_code ec;
    bj::value body = readJson(ctx.body, ec);
    if (ec || !body.is_object()) return decide(ctx, st, CacheStatus::Bypass);
    const bj::object& o = body.get_object();
    if (const bj::value* n = o.if_contains("n"); n && n->is_number() && n->to_number<double>() != 1)
      return decide(ctx, st, CacheStatus::Bypass);  // several choices: never kept
    if (!policy.all_requests && ctx.endpoint != Endpoint::Embeddings) {
      const bj::value* t = o.if_contains("temperature");
      if (!t || !t->is_number() || t->to_number<double>() != 0) return decide(ctx, st, CacheStatus::Bypass);
    }
    st.key = keyOf(ctx, o);
    st.keep = keep;
    // A refresh is looked up too when an old answer could stand in for a failed upstream.
    if (!lookup && policy.stale_if_error.count() == 0) return decide(ctx, st, CacheStatus::Refresh);
    // The semantic layer's inputs, while the body is parsed (only a lookup uses them).
    std::string text;
    if (lookup && policy.semantic && (!ctx.route || ctx.route->semantic_cache) && ctx.endpoint != Endpoint::Embeddings) {
      bj::object rest = o;
      text = takeLastUserText(ctx.endpoint, rest);
      if (!text.empty()) {
        std::string material = st.key.substr(0, st.key.rfind(':'));  // the scope and model part
        material += '\0';
        material += static_cast<char>('0' + static_cast<int>(ctx.endpoint));
        material += canonicalRequest(rest, ctx.config->cache.key_user);
        st.context = toHex(sha256(material));
        st.index = st.key.substr(0, st.key.rfind(':'));
      }
    }
    st.deciding = true;
    lookupExact(ctx, st, lookup, std::move(text));
    st.deciding = false;
    return st.answered ? st.answer : FilterStatus::Pause;
  }

  bool onUpstreamsFailed(RequestContext& ctx) override {
    CacheFilterState& st = state(ctx);
    if (!st.stale || st.stale->expires_ms <= cache_.now()) return false;
    if (answerHit(ctx, st, *st.stale) != FilterStatus::Stop) return false;
    st.status = CacheStatus::Stale;
    ctx.record_fields[static_cast<std::size_t>(RecordField::Cache)] = "stale";
    return true;
  }

  void onResponseHeaders(RequestContext& ctx) override {
    CacheFilterState& st = state(ctx);
    if (st.status == CacheStatus::None || !ctx.response_headers) return;
    ctx.response_headers->emplace_back("x-tahua-cache", statusName(st.status));
    if (st.status == CacheStatus::SemanticHit) ctx.response_headers->emplace_back("x-tahua-cache-similarity", st.similarity);
    st.capturing = st.keep && !ctx.local_reply && !ctx.error && ctx.status >= 200 && ctx.status < 300 && ctx.provider;
  }

  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    CacheFilterState& st = state(ctx);
    if (st.capturing) st.captured.piece(data, ctx.model->cache.max_entry_bytes);
  }

  void onResponseBody(RequestContext& ctx, std::string& body) override {
    CacheFilterState& st = state(ctx);
    if (st.capturing) st.captured.body(body, ctx.model->cache.max_entry_bytes);
  }

  void onComplete(RequestContext& ctx) override {
    CacheFilterState& st = state(ctx);
    if (st.status == CacheStatus::None) return;
    count(ctx, st);
    if (!st.capturing || !st.captured.complete() || st.captured.tooLarge() || ctx.error || ctx.status < 200 || ctx.status >= 300)
      return;
    // A fallback model's answer is not the model's the key names (a self-healing shift
    // chose the model before the key was made: its answer is the key's model's).
    if (ctx.fallback == "model") return;
    st.capturing = false;
    auto answer = std::make_shared<CachedAnswer>();
    answer->endpoint = static_cast<std::uint8_t>(ctx.endpoint);
    answer->streamed = ctx.streaming;
    answer->include_usage = ctx.facts.include_usage;
    answer->status = ctx.status;
    answer->content_type = ctx.streaming ? "text/event-stream; charset=utf-8" : "application/json";
    answer->body = st.captured.take();
    SecretScrubber(*ctx.provider).scrubWhole(answer->body);  // as the client's copy was
    answer->usage = ctx.usage;
    tag(ctx, *answer);
    const CachePolicy& policy = ctx.model->cache;
    answer->fresh_until_ms = cache_.now() + policy.ttl.count();
    answer->expires_ms = answer->fresh_until_ms + policy.stale_if_error.count();
    if (cache_.shared()) cache_.remotePut(st.key, *answer, Millis(policy.ttl.count() + policy.stale_if_error.count()));
    const std::int64_t kept_until = answer->expires_ms;  // the vector lives as long as its answer may serve
    if (keepsLocalCopy(ctx)) cache_.put(st.key, localCopy(ctx, std::move(answer)));
    if (!st.vector.empty()) cache_.semantic().addLater(st.index, std::move(st.vector), std::move(st.context), st.key, kept_until);
  }

 private:
  // Ends the decision: at once (still inside onUpstreamSelect), or by resuming the request.
  void finish(RequestContext& ctx, FilterStatus status) {
    CacheFilterState& st = state(ctx);
    if (st.deciding) {
      st.answered = true;
      st.answer = status;
    } else {
      ctx.resumer->resume(status);
    }
  }

  void lookupExact(RequestContext& ctx, CacheFilterState& st, bool lookup, std::string text) {
    if (auto found = cache_.get(st.key)) return finish(ctx, found_(ctx, st, found, lookup));
    if (!cache_.shared()) return missed(ctx, lookup, std::move(text));
    cache_.remoteGet(st.key, [this, &ctx, lookup, text = std::move(text)](std::shared_ptr<const CachedAnswer> found, bool) mutable {
      CacheFilterState& s = state(ctx);
      if (!found) return missed(ctx, lookup, std::move(text));  // Redis away is a miss: the request is still served
      if (keepsLocalCopy(ctx)) cache_.put(s.key, localCopy(ctx, found));
      finish(ctx, found_(ctx, s, found, lookup));
    });
  }

  // No exact answer: the semantic layer, if the model has it and there is a message.
  void missed(RequestContext& ctx, bool lookup, std::string text) {
    CacheFilterState& st = state(ctx);
    const FilterStatus miss = decide(ctx, st, lookup ? CacheStatus::Miss : CacheStatus::Refresh);
    if (text.empty() || st.index.empty()) return finish(ctx, miss);
    const std::string& model = ctx.model->cache.embedding_model;
    services_.callModel(model, Endpoint::Embeddings, embeddingRequestBody(model, {std::move(text)}), ctx.config->cache.embedding_timeout,
                        [this, &ctx](OutboundResponse r) {
      CacheFilterState& s = state(ctx);
      auto vectors = embeddingsOf(r, 1);
      if (vectors.empty()) return finish(ctx, FilterStatus::Continue);  // no embedding: a plain miss
      s.vector = std::move(vectors.front());
      auto match = cache_.semantic().find(s.index, s.vector, s.context, static_cast<float>(ctx.model->cache.threshold));
      if (!match) return finish(ctx, FilterStatus::Continue);
      char buf[16];
      std::snprintf(buf, sizeof buf, "%.4f", static_cast<double>(match->similarity));
      s.similarity = buf;
      auto answer = cache_.get(match->key);
      if (answer || !cache_.shared()) return finish(ctx, semanticHit(ctx, s, answer));
      cache_.remoteGet(match->key, [this, &ctx](std::shared_ptr<const CachedAnswer> found, bool) {
        finish(ctx, semanticHit(ctx, state(ctx), found));
      });
    });
  }

  FilterStatus semanticHit(RequestContext& ctx, CacheFilterState& st, const std::shared_ptr<const CachedAnswer>& answer) {
    if (!answer) return FilterStatus::Continue;  // its answer is gone: a miss
    if (answer->fresh_until_ms <= cache_.now()) {
      // Past its ttl: the answer of last resort if every upstream fails (stale_if_error).
      if (ctx.model->cache.stale_if_error.count() > 0 && !st.stale) st.stale = answer;
      return FilterStatus::Continue;
    }
    const FilterStatus status = answerHit(ctx, st, *answer);
    if (status != FilterStatus::Stop) return status;
    st.status = CacheStatus::SemanticHit;
    ctx.record_fields[static_cast<std::size_t>(RecordField::Cache)] = "semantic-hit";
    return status;
  }

  // Removes the last user message from `body` and returns its text ("" if none).
  static std::string takeLastUserText(Endpoint endpoint, bj::object& body) {
    auto textOf = [](const bj::value& content) {
      if (content.is_string()) return std::string(content.get_string());
      std::string t;
      if (content.is_array())
        for (const auto& part : content.get_array())
          if (const bj::object* p = part.if_object())
            if (const bj::value* x = p->if_contains("text"); x && x->is_string()) {
              if (!t.empty()) t += '\n';
              t += x->get_string();
            }
      return t;
    };
    const char* list = endpoint == Endpoint::Responses ? "input" : "messages";
    bj::value* items = body.if_contains(list);
    if (!items) return {};
    if (items->is_string()) {  // Responses: the whole input is the user's message
      std::string t(items->get_string());
      body.erase(list);
      return t;
    }
    if (!items->is_array() || items->get_array().empty()) return {};
    bj::array& a = items->get_array();
    const bj::object* last = a.back().if_object();
    if (!last) return {};
    const bj::value* role = last->if_contains("role");
    const bj::value* content = last->if_contains("content");
    if (!role || !role->is_string() || role->get_string() != "user" || !content) return {};
    std::string t = textOf(*content);
    if (!t.empty()) a.pop_back();
    return t;
  }

  FilterStatus decide(RequestContext& ctx, CacheFilterState& st, CacheStatus status) {
    st.status = status;
    if (status == CacheStatus::Bypass) st.keep = false;
    ctx.record_fields[static_cast<std::size_t>(RecordField::Cache)] = statusName(status);
    return FilterStatus::Continue;
  }

  // The key: the caller's scope, the endpoint, the model as served, the canonical body,
  // in one digest; its text also names the tenant, key and model by short hashes (for
  // purges), remembered per name.
  std::string keyOf(const RequestContext& ctx, const bj::object& body) {
    const CacheConfig& cfg = ctx.config->cache;
    const std::string_view tenant = ctx.principal.tenant ? std::string_view(ctx.principal.tenant->name) : std::string_view{};
    const std::string_view api_key = cfg.per_key && ctx.principal.key ? std::string_view(ctx.principal.key->name) : std::string_view{};
    const std::string_view model = ctx.model->name;
    std::string material;
    material.reserve(ctx.body.size() + tenant.size() + api_key.size() + model.size() + 8);
    material.append(tenant).push_back('\0');
    material.append(api_key).push_back('\0');
    material.append(model).push_back('\0');
    material += static_cast<char>('0' + static_cast<int>(ctx.endpoint));
    material.push_back('\0');
    material += canonicalRequest(body, cfg.key_user);
    // The guardrail policies that shape this request's answer: a kept answer is the one
    // they left, so a request under other policies (another key, a changed rule) misses.
    for (const auto& pol : ctx.config->guardrails.policies)
      if (guardrailPolicyApplies(pol, ctx) && (pol.rules->targets() & guardrails::kAnswerTargets))
        material.append("\0g").append(pol.name).append("\0").append(pol.fingerprint);
    const Sha256 digest = sha256(material);
    std::string key = "tahua:cache:t";
    key.reserve(13 + 3 * 18 + 64);
    key += nameHash(tenant);
    key += ":k";
    key += nameHash(api_key);
    key += ":m";
    key += nameHash(model);
    key += ':';
    key += toHex(digest);
    return key;
  }

  const std::string& nameHash(std::string_view name) {
    auto it = name_hashes_.find(name);
    if (it != name_hashes_.end()) return it->second;
    if (name_hashes_.size() >= 4096) name_hashes_.clear();  // bounded: tenants, keys and models seen
    return name_hashes_.emplace(std::string(name), cacheNameHash(name)).first->second;
  }

  void tag(const RequestContext& ctx, CachedAnswer& a) const {
    if (ctx.principal.tenant) a.tenant = ctx.principal.tenant->name;
    if (ctx.principal.key) a.key = ctx.principal.key->name;
    a.model = ctx.model->name;
  }

  // With a shared layer and local_ttl 0 replicas keep no copy: every hit reads Redis.
  bool keepsLocalCopy(const RequestContext& ctx) const { return !cache_.shared() || ctx.config->cache.local_ttl.count() > 0; }

  // The in-process copy: with a shared layer it lives at most cache.local_ttl, so a purge
  // through any replica reaches every replica's copies within it.
  std::shared_ptr<const CachedAnswer> localCopy(const RequestContext& ctx, std::shared_ptr<const CachedAnswer> a) const {
    if (!cache_.shared()) return a;
    const std::int64_t cap = cache_.now() + ctx.config->cache.local_ttl.count();
    if (a->expires_ms <= cap) return a;
    auto copy = std::make_shared<CachedAnswer>(*a);
    copy->expires_ms = cap;
    copy->fresh_until_ms = std::min(copy->fresh_until_ms, cap);
    return copy;
  }

  // An entry found: a hit while fresh (and looked up for one); else kept as the answer
  // of last resort if the model allows stale ones.
  FilterStatus found_(RequestContext& ctx, CacheFilterState& st, const std::shared_ptr<const CachedAnswer>& found, bool lookup) {
    if (lookup && found->fresh_until_ms > cache_.now()) return answerHit(ctx, st, *found);
    if (ctx.model->cache.stale_if_error.count() > 0) st.stale = found;
    return decide(ctx, st, lookup ? CacheStatus::Miss : CacheStatus::Refresh);
  }

  FilterStatus answerHit(RequestContext& ctx, CacheFilterState& st, const CachedAnswer& hit) {
    InboundOptions options;
    options.model = ctx.facts.model;
    options.include_usage = ctx.facts.include_usage;
    if (ctx.endpoint == Endpoint::Responses) options.echo = responsesInbound().requestEcho(ctx.body);
    auto form = cachedAnswerAs(hit, ctx.endpoint, ctx.facts.stream, ctx.facts.include_usage, options);
    if (!form) return decide(ctx, st, CacheStatus::Miss);  // unreadable: asked again, and replaced
    st.status = CacheStatus::Hit;
    st.keep = false;
    ctx.record_fields[static_cast<std::size_t>(RecordField::Cache)] = "hit";
    const std::int64_t saved = std::max<std::int64_t>(hit.usage.prompt_tokens, 0) + std::max<std::int64_t>(hit.usage.completion_tokens, 0);
    st.saved = std::to_string(saved);
    st.saved_usage = hit.usage;
    ctx.record_fields[static_cast<std::size_t>(RecordField::CacheTokensSaved)] = st.saved;
    // What the limits and the usage record count: zero tokens, or (hit_tokens) the answer's.
    if (ctx.config->cache.hit_tokens) {
      ctx.usage = hit.usage;
    } else {
      ctx.usage.prompt_tokens = 0;
      ctx.usage.completion_tokens = 0;
      ctx.usage.total_tokens = 0;
      ctx.usage.cached_tokens = 0;
    }
    ctx.local_reply = LocalReply{hit.status, std::move(form->body), std::move(form->content_type), false};
    return FilterStatus::Stop;
  }

  void count(const RequestContext& ctx, const CacheFilterState& st) {
    cache_.countLookup(st.status == CacheStatus::Hit, st.status == CacheStatus::SemanticHit, st.status == CacheStatus::Miss);
    const std::pair<std::string_view, std::string_view> id(ctx.model->name, statusName(st.status));
    auto it = metrics_.cache.find(id);
    if (it == metrics_.cache.end()) it = metrics_.cache.emplace(std::pair(std::string(id.first), std::string(id.second)), CacheSeries{}).first;
    ++it->second.requests;
    if (st.status == CacheStatus::Hit || st.status == CacheStatus::SemanticHit) {
      it->second.tokens_saved += static_cast<std::uint64_t>(std::max<std::int64_t>(st.saved_usage.prompt_tokens, 0) +
                                                            std::max<std::int64_t>(st.saved_usage.completion_tokens, 0));
      const double cost = costUsd(ctx.model, st.saved_usage);
      if (cost > 0) it->second.cost_saved_usd += cost;
    }
  }

  ResponseCache& cache_;
  WorkerMetrics& metrics_;
  WorkerServices& services_;
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::string, NameHash, std::equal_to<>> name_hashes_;
};

}  // namespace

std::unique_ptr<Filter> makeCacheFilter(ResponseCache& cache, WorkerMetrics& metrics, WorkerServices& services) {
  return std::make_unique<CacheFilter>(cache, metrics, services);
}

}  // namespace tahua
