#include "filters/guardrails/guardrail_filter.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/log.h"
#include "filters/guardrails/guarded_texts.h"
#include "filters/guardrails/moderation_call.h"
#include "filters/guardrails/output_moderation.h"
#include "filters/guardrails/policy_match.h"
#include "filters/usage/pending_records.h"
#include "filters/worker_services.h"
#include "guardrails/injection_signals.h"
#include "guardrails/rule_set.h"
#include "providers/embedding_call.h"
#include "telemetry/metrics.h"

namespace tahua {
namespace {

namespace json = boost::json;
using guardrails::Action;
using guardrails::RuleHit;
using guardrails::TextStream;
using guardrail_texts::Text;

// Bounds a hostile or broken upstream cannot push past: the texts a stream may carry at
// once (choices x tool calls, content blocks, output items), and the bytes held back
// waiting on matches that never complete (a long tool call whose arguments never close
// keeps every later event waiting behind it).
constexpr std::size_t kMaxChannels = 256;
constexpr std::size_t kMaxHeldBytes = 1 << 20;
// The prompt and answer text the quality check embeds, each (about 4k tokens: within
// what embedding models take).
constexpr std::size_t kMaxQualityText = 16 << 10;

// A quality verdict: ok, low (below the threshold) or unchecked (no embeddings in time).
struct QualityOutcome {
  std::string_view verdict;
  double similarity = 0;
  std::string error;  // unchecked: why
};

QualityOutcome judgeQuality(const OutboundResponse& res, double threshold) {
  QualityOutcome q;
  const auto vectors = embeddingsOf(res, 2);
  if (vectors.empty()) {
    q.verdict = "unchecked";
    q.error = res.status == 0 ? res.error : "not an embeddings answer (status " + std::to_string(res.status) + ")";
    return q;
  }
  q.similarity = cosineSimilarity(vectors[0], vectors[1]);
  q.verdict = q.similarity < threshold ? "low" : "ok";
  return q;
}

// A stream's quality check, answered after its request may have ended: what the answer
// needs then, with the request's context while it lives (onComplete clears it).
struct GuardState;
struct QualityCall {
  RequestContext* ctx = nullptr;
  GuardState* st = nullptr;
  std::string request_id, record_key, policy, rule;
  double threshold = 0;
};

struct Redaction {
  std::size_t begin, end;
  const std::string* mask;
};

// One text of a streamed answer (a choice's content, a tool call's arguments).
struct Channel {
  unsigned id = 0;
  std::uint8_t target = 0;
  std::size_t size = 0;  // original bytes so far
  std::vector<std::pair<std::size_t, TextStream>> streams;  // (policy index, its matcher)
  std::vector<Redaction> redactions;                       // sorted, disjoint
  bool closed = false;
  std::size_t safeEnd() const {
    if (closed) return size;
    std::size_t safe = size;
    for (const auto& [p, s] : streams) safe = std::min(safe, s.safeEnd());
    return safe;
  }
};

struct Segment {
  std::size_t channel;  // index into channels
  std::size_t begin, end;
};

struct HeldEvent {
  std::string raw;  // with its blank line
  std::vector<Segment> segments;
  bool full = false;  // repeats whole texts (Responses' done events)
};

// The answer's moderation verdicts, handed to the filter (defined after it).
class GuardrailFilter;
struct ModerationEvents final : OutputModeration::Handler {
  GuardrailFilter* filter = nullptr;
  RequestContext* ctx = nullptr;
  void moderationFlagged(const OutputModeration::Rule& r) override;
  void moderationUnchecked(const OutputModeration::Rule& r, std::string_view why) override;
  void moderationAnswered() override;
};

// An injection rule's highest score over the request's texts, and the signals behind it.
struct InjectionNote {
  const GuardrailPolicyConfig* policy = nullptr;
  std::uint16_t rule = 0;
  double score = 0;
  std::vector<std::uint16_t> signals;
};

struct GuardState {
  const ModelConfig* model = nullptr;  // the policies were attached for it
  std::vector<const GuardrailPolicyConfig*> policies;  // attached to this request
  std::uint8_t answer_targets = 0;
  std::string verdicts;  // "policy/rule:action,..." (header, records)
  std::vector<InjectionNote> injection;
  std::string signals;  // the notes, "policy/rule:score:signal+signal,..." (records only)
  bool streaming = false;
  bool blocked = false;
  std::string pending;   // an event not complete yet
  std::deque<HeldEvent> held;
  std::size_t held_bytes = 0;
  std::vector<Channel> channels;
  std::string out;
  Error block_error;
  Endpoint endpoint = Endpoint::None;
  // Moderation calls in flight for the request (onUpstreamSelect paused).
  int calls = 0;
  bool deciding = false, answered = false;
  FilterStatus answer = FilterStatus::Continue;
  // The answer-quality check: one rule per request (a blocking one first), sampled in.
  const GuardrailPolicyConfig* quality_policy = nullptr;
  const guardrails::RuleSpec* quality_rule = nullptr;
  std::string prompt;       // the last user message
  std::string answer_text;  // a stream's text, as it passed
  std::string quality, similarity;  // the verdict (record fields, x-tahua-quality)
  std::string quality_header;
  std::shared_ptr<QualityCall> call;  // a stream's check in flight
  std::string unchecked;  // moderation rules with no verdict, "policy/rule:stage,..." (records)
  // Moderation of the answer (output_moderation.h).
  bool moderates_answer = false;  // an attached policy has an output moderation rule
  ModerationEvents events;
  OutputModeration moderation;
  // A whole answer being judged (onAnswer): what is still out, and what it comes to.
  bool judging = false, quality_pending = false;
  FilterStatus judged = FilterStatus::Continue;
  bool answer_blocked = false;            // a moderation rule flagged it, action block
  std::optional<Error> answer_unchecked;  // a fail-closed moderation rule gave no verdict
  // A stream: the upstream finished; the stream was ended (block, bound); the session
  // waits for a moderation check (ResponseData::wait).
  bool ended = false, cut = false, waiting = false;
};

// Masks `hits` (merged, in `text`'s offsets) in a string, from the end so the earlier
// offsets stay right.
void maskString(json::string& text, std::vector<Redaction>& rs) {
  std::sort(rs.begin(), rs.end(), [](const Redaction& a, const Redaction& b) { return a.begin < b.begin; });
  std::string out;
  std::size_t at = 0;
  const std::string_view t(text);
  for (const Redaction& r : rs) {
    if (r.end <= at) continue;
    const std::size_t b = std::max(r.begin, at);
    out.append(t.substr(at, b - at));
    if (r.begin >= at) out += *r.mask;
    at = std::min(r.end, t.size());
  }
  out.append(t.substr(std::min(at, t.size())));
  text = out;
}

void addRedaction(std::vector<Redaction>& rs, Redaction r) {
  // Merge with every overlapping one; the earliest start's mask stays.
  auto it = rs.begin();
  while (it != rs.end()) {
    if (it->end < r.begin || it->begin > r.end) {
      ++it;
      continue;
    }
    if (it->begin < r.begin) r.mask = it->mask;
    r.begin = std::min(r.begin, it->begin);
    r.end = std::max(r.end, it->end);
    it = rs.erase(it);
  }
  rs.insert(std::upper_bound(rs.begin(), rs.end(), r, [](const Redaction& a, const Redaction& b) { return a.begin < b.begin; }), r);
}

class GuardrailFilter final : public FilterWithState<GuardState> {
 public:
  GuardrailFilter(WorkerMetrics& metrics, WorkerServices& services, PendingRecords& records)
      : metrics_(metrics), services_(services), records_(records) {}
  std::string_view name() const override { return "guardrails"; }
  bool wantsResponseData() const override { return true; }

  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    GuardState& st = state(ctx);
    st.model = ctx.model;
    std::uint8_t request_targets = 0;
    for (const auto& pol : ctx.config->guardrails.policies) {
      if (!guardrailPolicyApplies(pol, ctx)) continue;
      st.policies.push_back(&pol);
      st.answer_targets |= pol.rules->targets() & guardrails::kAnswerTargets;
      st.moderates_answer = st.moderates_answer || OutputModeration::inspectsAnswers(pol);
      request_targets |= pol.rules->targets() & guardrails::kRequestTargets;
    }
    const bool answering = ctx.endpoint == Endpoint::ChatCompletions || ctx.endpoint == Endpoint::Completions ||
                           ctx.endpoint == Endpoint::Messages || ctx.endpoint == Endpoint::Responses;
    if (answering) chooseQualityRule(st);
    if (!request_targets && !st.quality_rule) return FilterStatus::Continue;
    if (ctx.endpoint == Endpoint::StoredResponse || ctx.endpoint == Endpoint::Models || ctx.endpoint == Endpoint::CountTokens)
      return FilterStatus::Continue;
    json::monotonic_resource arena(arena_, sizeof arena_);
    json::error_code ec;
    json::value body = json::parse(ctx.body, ec, &arena);
    if (ec) return FilterStatus::Continue;  // the router answered bad JSON already; nothing to look at
    if (!request_targets) {
      takePrompt(ctx, st, body);
      return FilterStatus::Continue;
    }
    std::vector<Text> texts;
    guardrail_texts::requestTexts(ctx.endpoint, body, texts);
    const TextVerdict v = checkTexts(ctx, st, texts, "input", true);
    if (v.rule) {
      std::string message = "The request was blocked by guardrail rule \"" + v.policy->name + "/" + v.rule->name + "\".";
      // The caller learns why only when the policy says so (an attacker tunes against it).
      if (v.rule->explain)
        if (const InjectionNote* note = noteOf(st, *v.policy, *v.rule)) message += " Injection score " + score(note->score) + ": " + signalList(*note, ", ") + ".";
      ctx.fail(Error{ErrorKind::ContentBlocked, std::move(message)});
      return FilterStatus::Stop;
    }
    takePrompt(ctx, st, body);  // after the local redactions: what they masked never leaves
    const bool changed = v.changed;
    if (changed) {
      // The limits, the token estimate and the upstream see the masked body.
      ctx.body = json::serialize(body);
      auto inspected = inspectRequest(ctx.body, ctx.config->server.max_json_depth);
      if (auto* facts = std::get_if<RequestFacts>(&inspected)) {
        facts->model = ctx.facts.model;  // as the router left it
        ctx.facts = std::move(*facts);
      }
    }
    return moderate(ctx, st, texts);
  }

  // A fallback model: the policies attached to it apply to its answer too (the request's
  // text was checked before the first attempt, and every attempt sends that body).
  FilterStatus onReselect(RequestContext& ctx) override {
    GuardState& st = state(ctx);
    if (ctx.model == st.model) return FilterStatus::Continue;
    st.model = ctx.model;
    for (const auto& pol : ctx.config->guardrails.policies)
      if (std::find(st.policies.begin(), st.policies.end(), &pol) == st.policies.end() && guardrailPolicyApplies(pol, ctx)) {
        st.policies.push_back(&pol);
        st.answer_targets |= pol.rules->targets() & guardrails::kAnswerTargets;
        st.moderates_answer = st.moderates_answer || OutputModeration::inspectsAnswers(pol);
      }
    return FilterStatus::Continue;
  }

  // A non-streamed answer with a quality rule or an output moderation rule is judged
  // before it is sent. Quality: flagged (the x-tahua-quality header) or refused (block:
  // the next fallback model answers instead). Moderation: a flagged answer is blocked
  // (onResponseBody empties it), a fail-closed rule with no verdict turns it into a 503.
  bool judgesAnswers() const override { return true; }
  bool judgesAnswer(const RequestContext& ctx) const override {
    const GuardState& st = state(ctx);
    return (st.quality_rule != nullptr || st.moderates_answer) && !ctx.facts.stream;
  }

  FilterStatus onAnswer(RequestContext& ctx) override {
    GuardState& st = state(ctx);
    st.quality.clear();
    st.similarity.clear();
    st.answer_blocked = false;
    st.answer_unchecked.reset();
    st.judged = FilterStatus::Continue;
    std::string text;                  // the quality check's
    std::vector<std::string> answered;  // the moderation's
    {
      json::monotonic_resource arena(arena_, sizeof arena_);
      json::error_code ec;
      json::value doc = json::parse(*ctx.answer, ec, &arena);
      if (ec) return FilterStatus::Continue;
      std::vector<Text> texts;
      guardrail_texts::answerTexts(ctx.endpoint, doc, texts);
      for (const Text& t : texts)
        if (t.target == guardrails::kOutput && !t.text->empty()) {
          if (st.quality_rule) appendText(text, *t.text);
          if (st.moderates_answer) answered.emplace_back(*t.text);
        }
    }
    st.judging = true;  // answers that come at once do not resume
    if (!answered.empty()) {
      st.events.filter = this;
      st.events.ctx = &ctx;
      if (st.moderation.attach(st.policies, services_, st.events))
        st.moderation.checkAnswer(std::vector<std::string_view>(answered.begin(), answered.end()));
    }
    if (st.quality_rule && !text.empty()) {  // tool calls only: nothing to compare
      st.quality_pending = true;
      const GuardrailPolicyConfig* pol = st.quality_policy;
      const guardrails::RuleSpec* rule = st.quality_rule;
      embedForQuality(st, std::move(text), [this, &ctx, pol, rule](OutboundResponse res) {
        GuardState& s = state(ctx);
        s.quality_pending = false;
        const QualityOutcome q = judgeQuality(res, rule->quality.threshold);
        qualityVerdict(ctx.request_id, pol->name, rule->name, q);
        setQuality(ctx, s, q);
        if (q.verdict == "low") {
          verdict(ctx, s, *pol, rule->name, rule->action, "output");
          if (rule->action == Action::Block) {
            ctx.fail(Error{ErrorKind::ResponseQualityLow, "The answer was judged off-topic by guardrail rule \"" + pol->name + "/" + rule->name +
                                                             "\" (similarity " + s.similarity + ", below " + score(rule->quality.threshold) +
                                                             "); a retry is not likely to do better."});
            s.judged = FilterStatus::Stop;
          }
        }
        judgedPart(ctx, s);
      });
    }
    st.judging = false;
    if (st.quality_pending || st.moderation.callsInFlight() > 0) return FilterStatus::Pause;
    return st.judged;
  }

  // One of a whole answer's checks answered: the answer goes on once none is out.
  void judgedPart(RequestContext& ctx, GuardState& st) {
    if (st.judging || st.quality_pending || st.moderation.callsInFlight() > 0) return;
    ctx.resumer->resume(st.judged);
  }

  void moderationFlagged(RequestContext& ctx, const OutputModeration::Rule& r) {
    GuardState& st = state(ctx);
    verdict(ctx, st, *r.policy, r.rule->name, r.rule->action, "output");
    if (r.rule->action != Action::Block) return;
    if (st.streaming) block(st, *r.policy, *r.rule);
    else st.answer_blocked = true;
  }

  void moderationUnchecked(RequestContext& ctx, const OutputModeration::Rule& r, std::string_view why) {
    GuardState& st = state(ctx);
    unchecked(ctx, st, *r.policy, *r.rule, why, "output");
    if (!r.rule->moderation.fail_closed) return;
    Error error{ErrorKind::GuardrailUnavailable,
                "The guardrail \"" + r.policy->name + "/" + r.rule->name + "\" could not check the answer; please retry."};
    if (!st.streaming) {
      st.answer_unchecked = std::move(error);
    } else if (!st.blocked) {
      st.blocked = true;
      st.block_error = std::move(error);
    }
  }

  void moderationAnswered(RequestContext& ctx) {
    GuardState& st = state(ctx);
    if (!st.streaming) return judgedPart(ctx, st);
    // A stream waiting on the check goes on (a block ends it at once).
    if (st.waiting && (st.blocked || !st.moderation.busy(st.ended))) {
      st.waiting = false;
      ctx.resumer->resume(FilterStatus::Continue);
    }
  }

  void onResponseHeaders(RequestContext& ctx) override {
    GuardState& st = state(ctx);
    st.endpoint = ctx.endpoint;
    const bool answered = ctx.status >= 200 && ctx.status < 300 && !ctx.error && !ctx.local_reply;
    st.streaming = ctx.streaming && (st.answer_targets || st.quality_rule) && answered;
    if (st.streaming && st.moderates_answer) {
      st.events.filter = this;
      st.events.ctx = &ctx;
      st.moderation.attach(st.policies, services_, st.events);
    }
    if (!ctx.response_headers) return;
    if (!st.verdicts.empty()) ctx.response_headers->emplace_back("x-tahua-guardrails", st.verdicts);
    if (!st.quality.empty()) {
      st.quality_header = st.similarity.empty() ? st.quality : st.quality + "; similarity=" + st.similarity;
      ctx.response_headers->emplace_back("x-tahua-quality", st.quality_header);
    }
    // A refused answer: the SDKs' own retries would only pay for more of the same.
    if (ctx.error && ctx.error->kind == ErrorKind::ResponseQualityLow) ctx.response_headers->emplace_back("x-should-retry", "false");
  }

  void onComplete(RequestContext& ctx) override {
    GuardState& st = state(ctx);
    if (st.call) {  // a stream's check still in flight: its verdict goes to PendingRecords
      st.call->ctx = nullptr;
      st.call->st = nullptr;
    }
  }

  void onResponseBody(RequestContext& ctx, std::string& body) override {
    GuardState& st = state(ctx);
    if (!st.answer_targets || ctx.status < 200 || ctx.status >= 300 || ctx.error) return;
    json::monotonic_resource arena(arena_, sizeof arena_);
    json::error_code ec;
    json::value doc = json::parse(body, ec, &arena);
    if (ec) return;
    std::vector<Text> texts;
    guardrail_texts::answerTexts(ctx.endpoint, doc, texts);
    const TextVerdict v = checkTexts(ctx, st, texts, "output", false);
    bool changed = v.changed;
    const bool block = v.rule != nullptr || st.answer_blocked;
    if (block) {
      guardrail_texts::blockAnswer(ctx.endpoint, doc);
      changed = true;
    } else if (st.answer_unchecked) {
      // Fail closed: the unchecked answer is not given (its tokens are billed).
      ctx.fail(*st.answer_unchecked);
      ctx.status = st.answer_unchecked->httpStatus();
      body = ctx.errorBody(*st.answer_unchecked);
      return;
    }
    if (changed) body = json::serialize(doc);
    if (!st.verdicts.empty() && ctx.response_headers) {
      auto& hs = *ctx.response_headers;
      hs.erase(std::remove_if(hs.begin(), hs.end(), [](const auto& h) { return h.first == "x-tahua-guardrails"; }), hs.end());
      hs.emplace_back("x-tahua-guardrails", st.verdicts);
    }
  }

  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    GuardState& st = state(ctx);
    if (!st.streaming) return;
    if (data.aborted()) {  // held text is never sent
      st.held.clear();
      st.held_bytes = 0;
      st.pending.clear();
      return;
    }
    if (st.cut) {
      data.replace({});
      return;
    }
    st.out.clear();
    if (!st.blocked) {  // a moderation verdict may have blocked it since the last piece
      st.pending.append(data.bytes());
      std::size_t pos = 0;
      for (;;) {
        const std::size_t lf = st.pending.find("\n\n", pos);
        const std::size_t crlf = st.pending.find("\r\n\r\n", pos);
        if (lf == std::string::npos && crlf == std::string::npos) break;
        const std::size_t end = crlf < lf ? crlf + 4 : lf + 2;
        event(ctx, st, std::string_view(st.pending).substr(pos, end - pos));
        pos = end;
        if (st.blocked) break;
      }
      st.pending.erase(0, pos);
      if (data.last() && !st.blocked && !st.ended) {
        st.ended = true;
        if (!st.pending.empty()) {
          event(ctx, st, st.pending);
          st.pending.clear();
        }
        for (std::size_t c = 0; c < st.channels.size(); ++c) closeChannel(ctx, st, c);
      }
    }
    if (!st.blocked) st.moderation.check(st.ended);
    if (!st.blocked) release(ctx, st);
    const bool waits = !st.blocked && st.moderation.busy(st.ended);
    if (st.ended && !st.blocked && !waits) checkStreamQuality(ctx, st);
    if (st.blocked) {
      // What is held back is dropped: it holds the match, or text the block cuts off.
      st.cut = true;
      st.held.clear();
      st.held_bytes = 0;
      data.replace(st.out);
      data.fail(st.block_error);
      return;
    }
    if (waits) {
      st.waiting = true;
      data.wait();
    }
    data.replace(st.out);
  }

 private:
  struct TextVerdict {
    const GuardrailPolicyConfig* policy = nullptr;  // of the first rule that blocks
    const guardrails::RuleSpec* rule = nullptr;
    bool changed = false;  // a mask was written into a text
  };

  // Every text through every policy of the request: verdicts recorded at `stage` (none
  // when empty), masks written into the texts, the first blocking rule returned (with
  // `stop_at_block`, at once: nothing after it is looked at or masked).
  TextVerdict checkTexts(RequestContext& ctx, GuardState& st, const std::vector<Text>& texts, std::string_view stage, bool stop_at_block) {
    TextVerdict v;
    std::vector<RuleHit> hits;
    std::vector<Redaction> masks;
    for (const Text& t : texts) {
      masks.clear();
      for (const GuardrailPolicyConfig* pol : st.policies) {
        hits.clear();
        readings_.clear();
        pol->rules->scanText(*t.text, scratch_, t.target, hits, &readings_);
        for (auto& r : readings_) note(ctx, st, *pol, r);
        guardrails::mergeHits(hits);
        for (const RuleHit& h : hits) {
          const auto& rule = pol->rules->rules()[h.rule];
          if (!stage.empty()) verdict(ctx, st, *pol, rule.name, rule.action, stage, noteOf(st, *pol, rule));
          if (rule.action == Action::Redact) masks.push_back(Redaction{h.begin, h.end, &rule.mask});
          if (rule.action != Action::Block || v.rule) continue;
          v.policy = pol;
          v.rule = &rule;
          if (stop_at_block) return v;
        }
      }
      if (!masks.empty() && !v.rule) {
        std::vector<Redaction> merged;
        for (const auto& m : masks) addRedaction(merged, m);
        maskString(*t.text, merged);
        v.changed = true;
      }
    }
    return v;
  }

  // The moderation rules' calls, with the request's text after the local redactions (what
  // the local rules masked never leaves the gateway). Continue at once when there are
  // none; else Pause until every call answered or timed out.
  FilterStatus moderate(RequestContext& ctx, GuardState& st, const std::vector<Text>& texts) {
    st.deciding = true;
    st.answered = false;
    for (const GuardrailPolicyConfig* pol : st.policies) {
      const auto& rules = pol->rules->rules();
      for (std::size_t r = 0; r < rules.size(); ++r) {
        if (rules[r].detector != guardrails::RuleSpec::Detector::Moderation) continue;
        std::vector<std::string_view> input;
        for (const Text& t : texts)
          if ((t.target & rules[r].targets) && !t.text->empty()) input.emplace_back(*t.text);
        if (input.empty()) continue;
        auto call = guardrail_moderation::request(rules[r].moderation, input);
        if (!call) continue;  // checked when the config loaded
        ++st.calls;
        services_.fetch(std::move(*call), [this, &ctx, pol, r, n = input.size()](OutboundResponse res) { moderated(ctx, *pol, r, res, n); });
      }
    }
    st.deciding = false;
    if (st.calls == 0) return st.answered ? st.answer : FilterStatus::Continue;
    return FilterStatus::Pause;
  }

  void moderated(RequestContext& ctx, const GuardrailPolicyConfig& pol, std::size_t r, const OutboundResponse& res, std::size_t inputs) {
    GuardState& st = state(ctx);
    const auto& rule = pol.rules->rules()[r];
    const auto reading = guardrail_moderation::read(rule.moderation, res, inputs);
    if (reading.verdict == guardrail_moderation::Verdict::Flagged) {
      verdict(ctx, st, pol, rule.name, rule.action, "input");
      if (rule.action == Action::Block && !st.answered) {
        ctx.fail(Error{ErrorKind::ContentBlocked, "The request was blocked by guardrail rule \"" + pol.name + "/" + rule.name + "\"."});
        st.answered = true;
        st.answer = FilterStatus::Stop;
      }
    } else if (reading.verdict == guardrail_moderation::Verdict::None) {
      unchecked(ctx, st, pol, rule, reading.why, "input");
      if (rule.moderation.fail_closed && !st.answered) {
        ctx.fail(Error{ErrorKind::GuardrailUnavailable,
                       "The guardrail \"" + pol.name + "/" + rule.name + "\" could not check the request; please retry."});
        st.answered = true;
        st.answer = FilterStatus::Stop;
      }
    }
    if (--st.calls > 0) return;
    if (!st.deciding) ctx.resumer->resume(st.answered ? st.answer : FilterStatus::Continue);
  }

  // A moderation call with no verdict: logged (never the text), counted, and named in the
  // records' `guardrails_unchecked`; the rule's on_error decides what follows.
  void unchecked(RequestContext& ctx, GuardState& st, const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule, std::string_view why,
                 std::string_view stage) {
    log::warn("guardrail moderation gave no verdict", {{"request_id", ctx.request_id}, {"policy", pol.name}, {"rule", rule.name},
                                                       {"stage", stage}, {"error", why},
                                                       {"on_error", rule.moderation.fail_closed ? "block" : "allow"}});
    ++metrics_.guardrail_actions[{pol.name, rule.name, "unchecked", std::string(stage)}];
    const std::string tag = pol.name + "/" + rule.name + ":" + std::string(stage);
    if (listed(st.unchecked, tag)) return;
    if (!st.unchecked.empty()) st.unchecked += ',';
    st.unchecked += tag;
    ctx.record_fields[static_cast<std::size_t>(RecordField::GuardrailsUnchecked)] = st.unchecked;
  }

  // Whether a comma-separated list has `tag` as one of its items.
  static bool listed(std::string_view list, std::string_view tag) {
    for (std::size_t at = 0; (at = list.find(tag, at)) != std::string_view::npos; at += tag.size()) {
      const std::size_t end = at + tag.size();
      if ((at == 0 || list[at - 1] == ',') && (end == list.size() || list[end] == ',')) return true;
    }
    return false;
  }

  // The quality rule of the request: the first attached one that blocks, else the first
  // that flags; checked for its `sample` share of requests.
  void chooseQualityRule(GuardState& st) {
    for (int want_block = 1; want_block >= 0 && !st.quality_rule; --want_block)
      for (const GuardrailPolicyConfig* pol : st.policies) {
        for (const auto& rule : pol->rules->rules())
          if (rule.detector == guardrails::RuleSpec::Detector::Quality && (rule.action == Action::Block) == (want_block == 1)) {
            st.quality_policy = pol;
            st.quality_rule = &rule;
            break;
          }
        if (st.quality_rule) break;
      }
    if (!st.quality_rule || st.quality_rule->quality.sample >= 1) return;
    thread_local std::minstd_rand rng{std::random_device{}()};
    if (std::uniform_real_distribution<double>(0, 1)(rng) >= st.quality_rule->quality.sample) st.quality_rule = nullptr;
  }

  // The last user message, which the quality check compares the answer with (none: no check).
  static void takePrompt(const RequestContext& ctx, GuardState& st, json::value& body) {
    if (!st.quality_rule) return;
    st.prompt = guardrail_texts::lastUserText(ctx.endpoint, body);
    if (st.prompt.empty()) st.quality_rule = nullptr;
    else if (st.prompt.size() > kMaxQualityText) st.prompt.resize(utf8Floor(st.prompt, kMaxQualityText));
  }

  static std::size_t utf8Floor(std::string_view s, std::size_t n) {
    if (n >= s.size()) return s.size();
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    return n;
  }

  // Appends a text (whole answers: texts on lines of their own), up to kMaxQualityText.
  static void appendText(std::string& to, std::string_view text, bool separate = true) {
    if (to.size() >= kMaxQualityText) return;
    if (separate && !to.empty()) to += '\n';
    to.append(text.substr(0, utf8Floor(text, kMaxQualityText - std::min(to.size(), kMaxQualityText))));
  }


  // The prompt and `answer` embedded in one call to the rule's model (through the worker's
  // upstream client); `done` gets its answer.
  void embedForQuality(const GuardState& st, std::string answer, std::function<void(OutboundResponse)> done) {
    const guardrails::QualitySpec& q = st.quality_rule->quality;
    services_.callModel(q.embedding_model, Endpoint::Embeddings, embeddingRequestBody(q.embedding_model, {st.prompt, std::move(answer)}),
                        Millis(q.timeout_ms), std::move(done));
  }

  // Counted and logged (never the texts), with or without the request.
  void qualityVerdict(std::string_view request_id, const std::string& policy, const std::string& rule, const QualityOutcome& q) {
    qualityCounted(metrics_, request_id, policy, rule, q);
  }
  static void qualityCounted(WorkerMetrics& metrics, std::string_view request_id, const std::string& policy, const std::string& rule,
                             const QualityOutcome& q) {
    ++metrics.guardrail_quality[{policy, rule, std::string(q.verdict)}];
    if (q.verdict == "unchecked")
      log::warn("guardrail quality check gave no verdict", {{"request_id", request_id}, {"policy", policy}, {"rule", rule}, {"error", q.error}});
    else
      log::info("guardrail quality", {{"request_id", request_id}, {"policy", policy}, {"rule", rule}, {"verdict", q.verdict},
                                      {"similarity", q.similarity}});
  }

  static void setQuality(RequestContext& ctx, GuardState& st, const QualityOutcome& q) {
    st.quality = q.verdict;
    st.similarity.clear();
    if (q.verdict != "unchecked") {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4f", q.similarity);
      st.similarity = buf;
    }
    ctx.record_fields[static_cast<std::size_t>(RecordField::Quality)] = st.quality;
    ctx.record_fields[static_cast<std::size_t>(RecordField::QualitySimilarity)] = st.similarity;
  }

  // A streamed answer that ended normally: checked without delaying anything. A verdict
  // in before the request ends goes into its records; a later one into PendingRecords
  // (the usage record waits for it up to 2 s, else a second record carries it).
  void checkStreamQuality(RequestContext& ctx, GuardState& st) {
    if (!st.quality_rule || st.answer_text.empty() || st.call) return;
    auto call = std::make_shared<QualityCall>();
    call->ctx = &ctx;
    call->st = &st;
    call->request_id = ctx.request_id;
    call->record_key = PendingRecords::keyOf(ctx.request_id, ctx.start);
    call->policy = st.quality_policy->name;
    call->rule = st.quality_rule->name;
    call->threshold = st.quality_rule->quality.threshold;
    st.call = call;
    st.quality = "pending";
    ctx.record_fields[static_cast<std::size_t>(RecordField::Quality)] = st.quality;
    // Only worker-lived things are captured: the filter may be gone (a reload) by then.
    embedForQuality(st, std::move(st.answer_text), [call, &metrics = metrics_, &records = records_](OutboundResponse res) {
      const QualityOutcome q = judgeQuality(res, call->threshold);
      qualityCounted(metrics, call->request_id, call->policy, call->rule, q);
      if (q.verdict == "low") {
        ++metrics.guardrail_actions[{call->policy, call->rule, std::string(guardrails::actionName(Action::Flag)), "output"}];
      }
      if (call->ctx) {
        setQuality(*call->ctx, *call->st, q);
        if (q.verdict == "low") appendVerdict(*call->ctx, *call->st, call->policy + "/" + call->rule + ":flag");
        call->st->call.reset();  // last: `call` is this closure's own copy
        return;
      }
      std::string fields = "\"quality\":\"" + std::string(q.verdict) + "\",\"quality_similarity\":";
      if (q.verdict == "unchecked") {
        fields += "null";
      } else {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.4f", q.similarity);
        fields += buf;
      }
      records.settle(call->record_key, fields);
    });
  }

  // An injection reading of one text: the rule's note keeps the highest score, and the
  // records' `guardrail_signals` are written again from the notes.
  static void note(RequestContext& ctx, GuardState& st, const GuardrailPolicyConfig& pol, guardrails::InjectionReading& r) {
    auto it = std::find_if(st.injection.begin(), st.injection.end(), [&](const InjectionNote& n) { return n.policy == &pol && n.rule == r.rule; });
    if (it == st.injection.end()) {
      InjectionNote fresh;
      fresh.policy = &pol;
      fresh.rule = r.rule;
      it = st.injection.insert(st.injection.end(), std::move(fresh));
    }
    if (r.score <= it->score) return;
    it->score = r.score;
    it->signals.swap(r.signals);
    st.signals.clear();
    for (const InjectionNote& n : st.injection) {
      if (!st.signals.empty()) st.signals += ',';
      st.signals += n.policy->name + "/" + n.policy->rules->rules()[n.rule].name + ":" + score(n.score) + ":" + signalList(n, "+");
    }
    ctx.record_fields[static_cast<std::size_t>(RecordField::GuardrailSignals)] = st.signals;
  }

  static const InjectionNote* noteOf(const GuardState& st, const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule) {
    if (rule.detector != guardrails::RuleSpec::Detector::Injection) return nullptr;
    const auto r = static_cast<std::uint16_t>(&rule - pol.rules->rules().data());
    for (const InjectionNote& n : st.injection)
      if (n.policy == &pol && n.rule == r) return &n;
    return nullptr;
  }

  static std::string signalList(const InjectionNote& n, std::string_view separator) {
    std::string out;
    for (std::uint16_t id : n.signals) {
      if (!out.empty()) out += separator;
      out += guardrails::injectionSignalName(id);
    }
    return out;
  }

  static std::string score(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", s);
    return buf;
  }

  void verdict(RequestContext& ctx, GuardState& st, const GuardrailPolicyConfig& pol, const std::string& rule, Action action,
               std::string_view stage, const InjectionNote* injection = nullptr) {
    const std::string tag = pol.name + "/" + rule + ":" + std::string(guardrails::actionName(action));
    // Once per rule, action and request (a rule matching ten times is one verdict).
    if (listed(st.verdicts, tag)) return;
    appendVerdict(ctx, st, tag);
    ++metrics_.guardrail_actions[{pol.name, rule, std::string(guardrails::actionName(action)), std::string(stage)}];
    json::object fields{{"request_id", ctx.request_id}, {"policy", pol.name}, {"rule", rule}, {"action", guardrails::actionName(action)},
                        {"stage", stage}};
    if (injection) {
      fields["score"] = injection->score;
      fields["signals"] = signalList(*injection, ",");
    }
    log::info("guardrail", std::move(fields));
  }

  static void appendVerdict(RequestContext& ctx, GuardState& st, const std::string& tag) {
    if (!st.verdicts.empty()) st.verdicts += ',';
    st.verdicts += tag;
    ctx.record_fields[static_cast<std::size_t>(RecordField::Guardrails)] = st.verdicts;
  }

  void block(GuardState& st, const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule) {
    if (st.blocked) return;
    st.blocked = true;
    st.block_error = Error{ErrorKind::ContentBlocked, "The answer was stopped by guardrail rule \"" + pol.name + "/" + rule.name + "\"."};
  }

  // The hits of one policy on one channel of a stream.
  void onHits(RequestContext& ctx, GuardState& st, Channel& ch, const GuardrailPolicyConfig& pol, std::vector<RuleHit>& hits) {
    for (const RuleHit& h : hits) {
      const auto& rule = pol.rules->rules()[h.rule];
      verdict(ctx, st, pol, rule.name, rule.action, "output");
      if (rule.action == Action::Block) {
        block(st, pol, rule);
      } else if (rule.action == Action::Redact) {
        addRedaction(ch.redactions, Redaction{h.begin, h.end, &rule.mask});
      }
    }
    hits.clear();
  }

  static constexpr std::size_t kNoChannel = static_cast<std::size_t>(-1);

  std::size_t channelOf(GuardState& st, unsigned id, std::uint8_t target) {
    for (std::size_t i = 0; i < st.channels.size(); ++i)
      if (st.channels[i].id == id && st.channels[i].target == target) return i;
    if (st.channels.size() >= kMaxChannels) return kNoChannel;
    Channel ch;
    ch.id = id;
    ch.target = target;
    for (std::size_t p = 0; p < st.policies.size(); ++p)
      if (st.policies[p]->rules->targets() & target) ch.streams.emplace_back(p, TextStream(st.policies[p]->rules, target));
    st.channels.push_back(std::move(ch));
    return st.channels.size() - 1;
  }

  void closeChannel(RequestContext& ctx, GuardState& st, std::size_t c) {
    Channel& ch = st.channels[c];
    if (ch.closed) return;
    ch.closed = true;
    std::vector<RuleHit> hits;
    for (auto& [p, stream] : ch.streams) {
      stream.close(scratch_, hits);
      onHits(ctx, st, ch, *st.policies[p], hits);
    }
  }

  static std::string_view eventData(std::string_view raw, std::string& joined) {
    // The data lines' values, joined by newlines (nearly always one line).
    joined.clear();
    std::size_t at = 0;
    int lines = 0;
    std::string_view single;
    while (at < raw.size()) {
      std::size_t nl = raw.find('\n', at);
      if (nl == std::string_view::npos) nl = raw.size();
      std::string_view line = raw.substr(at, nl - at);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.substr(0, 5) == "data:") {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        if (lines++) joined += '\n';
        else single = line;
        joined.append(line);
      }
      at = nl + 1;
    }
    return lines == 1 ? single : std::string_view(joined);
  }

  void event(RequestContext& ctx, GuardState& st, std::string_view raw) {
    HeldEvent ev;
    ev.raw.assign(raw);
    std::string joined;
    const std::string_view data = eventData(ev.raw, joined);
    if (!data.empty() && data.front() == '{') {
      // An event's DOM lives in this worker's buffer (no allocation for a usual event).
      json::monotonic_resource arena(arena_, sizeof arena_);
      json::error_code ec;
      json::value doc = json::parse(data, ec, &arena);
      if (!ec) {
        guardrail_texts::EventTexts texts;
        guardrail_texts::eventTexts(ctx.endpoint, doc, texts);
        ev.full = texts.full;
        if (!texts.full) {
          std::vector<RuleHit> hits;
          for (const Text& t : texts.pieces) {
            const std::size_t c = channelOf(st, t.channel, t.target);
            if (c == kNoChannel) {
              stopUnchecked(ctx, st, "more than 256 choices, content blocks or tool calls");
              return;
            }
            if (st.quality_rule && t.target == guardrails::kOutput) appendText(st.answer_text, *t.text, false);
            Channel& ch = st.channels[c];
            const std::size_t begin = ch.size;
            ch.size += t.text->size();
            if (t.target == guardrails::kOutput) st.moderation.feed(c, *t.text);
            ev.segments.push_back(Segment{c, begin, ch.size});
            for (auto& [p, stream] : ch.streams) {
              stream.feed(*t.text, scratch_, hits);
              onHits(ctx, st, ch, *st.policies[p], hits);
            }
          }
        }
        for (unsigned base : texts.closes)
          for (std::size_t c = 0; c < st.channels.size(); ++c)
            if (st.channels[c].id / 1024 == base / 1024) closeChannel(ctx, st, c);
      }
    }
    st.held_bytes += ev.raw.size();
    st.held.push_back(std::move(ev));
    if (st.held_bytes > kMaxHeldBytes) stopUnchecked(ctx, st, "more than 1 MiB of it waited on a match that never completed");
  }

  // The stream cannot be checked within the bounds: it ends, as a block would, with an
  // error of the upstream's (nothing it held is sent).
  void stopUnchecked(RequestContext& ctx, GuardState& st, std::string_view why) {
    if (st.blocked) return;
    st.blocked = true;
    st.block_error = Error{ErrorKind::UpstreamBadResponse, "The answer could not be checked by the guardrails: " + std::string(why) + "."};
    log::warn("guardrail stream stopped", {{"request_id", ctx.request_id}, {"reason", why}});
  }

  // Sends the held events no match can still reach, in order, rewritten where masked.
  void release(RequestContext& ctx, GuardState& st) {
    while (!st.held.empty()) {
      HeldEvent& ev = st.held.front();
      bool ready = true, masked = false;
      for (const Segment& s : ev.segments) {
        const Channel& ch = st.channels[s.channel];
        if (s.end > std::min(ch.safeEnd(), st.moderation.gate(s.channel, st.ended))) ready = false;
        for (const Redaction& r : ch.redactions)
          if (r.begin < s.end && r.end > s.begin) masked = true;
      }
      if (!ready) return;
      if (masked || ev.full) rewrite(ctx, st, ev);
      else st.out += ev.raw;
      if (st.blocked) return;  // a whole text repeated in a done event held a blocked match
      st.held_bytes -= ev.raw.size();
      st.held.pop_front();
    }
  }

  void rewrite(RequestContext& ctx, GuardState& st, HeldEvent& ev) {
    std::string joined;
    json::error_code ec;
    json::value doc = json::parse(eventData(ev.raw, joined), ec);
    if (ec) return;  // parsed before: not reached; the event is dropped rather than leak
    guardrail_texts::EventTexts texts;
    // The endpoint only decides the walk; the event was walked with it before.
    guardrail_texts::eventTexts(st.endpoint, doc, texts);
    if (ev.full) {
      // Whole texts the stream delivered in pieces: checked again (always: an upstream's
      // whole text need not be what its pieces said; a verdict is counted once), sent as
      // they came when nothing in them is masked.
      const TextVerdict v = checkTexts(ctx, st, texts.pieces, "output", false);
      if (v.rule) {
        block(st, *v.policy, *v.rule);
        return;
      }
      if (!v.changed) {
        st.out += ev.raw;
        return;
      }
    } else {
      for (std::size_t k = 0; k < texts.pieces.size() && k < ev.segments.size(); ++k) {
        const Segment& s = ev.segments[k];
        std::vector<Redaction> local;
        for (const Redaction& r : st.channels[s.channel].redactions)
          if (r.begin < s.end && r.end > s.begin)
            // In the piece's offsets; a mask goes where its match starts (in an earlier
            // piece: nothing here but the removal).
            local.push_back(Redaction{r.begin >= s.begin ? r.begin - s.begin : 0, std::min(r.end, s.end) - s.begin,
                                      r.begin >= s.begin ? r.mask : &kNoMask});
        maskString(*texts.pieces[k].text, local);
      }
    }
    // The event again: its other lines as they were, one data line.
    std::string out;
    bool data_done = false;
    std::size_t at = 0;
    const std::string_view raw = ev.raw;
    while (at < raw.size()) {
      std::size_t nl = raw.find('\n', at);
      if (nl == std::string_view::npos) nl = raw.size();
      const std::string_view line = raw.substr(at, nl - at);
      if (line.substr(0, 5) == "data:") {
        if (!data_done) out.append("data: ").append(json::serialize(doc)).append("\n");
        data_done = true;
      } else if (!line.empty() && line != "\r") {
        out.append(line).append("\n");
      }
      at = nl + 1;
    }
    out += "\n";
    st.out += out;
  }

  static inline const std::string kNoMask;
  std::vector<guardrails::InjectionReading> readings_;  // this worker's, reused
  WorkerMetrics& metrics_;
  WorkerServices& services_;
  PendingRecords& records_;
  guardrails::RuleScratch scratch_;  // this worker's
  alignas(16) unsigned char arena_[16384];
};

void ModerationEvents::moderationFlagged(const OutputModeration::Rule& r) { filter->moderationFlagged(*ctx, r); }
void ModerationEvents::moderationUnchecked(const OutputModeration::Rule& r, std::string_view why) { filter->moderationUnchecked(*ctx, r, why); }
void ModerationEvents::moderationAnswered() { filter->moderationAnswered(*ctx); }

}  // namespace

std::unique_ptr<Filter> makeGuardrailFilter(WorkerMetrics& metrics, WorkerServices& services, PendingRecords& records) {
  return std::make_unique<GuardrailFilter>(metrics, services, records);
}

}  // namespace tahua
