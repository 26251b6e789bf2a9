#include "filters/guardrails/guardrail_filter.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/json_read.h"
#include "core/log.h"
#include "filters/guardrails/chat_event_texts.h"
#include "filters/guardrails/guarded_texts.h"
#include "filters/guardrails/held_events.h"
#include "filters/guardrails/input_moderation.h"
#include "filters/guardrails/output_moderation.h"
#include "filters/guardrails/policy_match.h"
#include "filters/guardrails/quality_check.h"
#include "filters/worker_services.h"
#include "guardrails/injection_signals.h"
#include "guardrails/rule_set.h"
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
  // Text that arrived since the matchers last ran: they run once a piece of the stream,
  // not once an event (a whole answer is ~20 events of a few bytes each, and a scan's
  // fixed cost was most of a guarded event's).
  std::string unscanned;
  bool queued = false;  // listed in GuardState::to_scan
  bool closed = false;
  std::size_t safeEnd() const {
    if (closed) return size;
    std::size_t safe = size;
    for (const auto& [p, s] : streams) safe = std::min(safe, s.safeEnd());
    return safe;
  }
};

// Boost.JSON stops at 32 levels by default, below what the router lets in
// (server.max_json_depth, 128): a body nested deeper in a field the rules ignore was let
// through unchecked. A request is read to the router's bound; answers and events as every
// reader does (readJson, core/json_read.h).
inline json::parse_options requestDepth(const RequestContext& ctx) {
  json::parse_options o;
  o.max_depth = ctx.config->server.max_json_depth;
  return o;
}

using guardrail_stream::HeldEvent;
using guardrail_stream::HeldEvents;
using guardrail_stream::Segment;

// The moderation verdicts (the request's and the answer's), handed to the filter (defined
// after it).
class GuardrailFilter;
struct ModerationEvents final : InputModeration::Handler, OutputModeration::Handler {
  GuardrailFilter* filter = nullptr;
  RequestContext* ctx = nullptr;
  void requestFlagged(const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule) override;
  void requestUnchecked(const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule, std::string_view why) override;
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
  HeldEvents held;  // the stream's events not sent yet (held_events.h)
  std::vector<Channel> channels;
  std::vector<std::size_t> to_scan;  // channels with unscanned text, in order of arrival
  std::string out;
  Error block_error;
  Endpoint endpoint = Endpoint::None;
  InputModeration input_moderation;  // of the request's text (input_moderation.h)
  QualityCheck quality;  // the answer-quality check (quality_check.h)
  std::string unchecked;  // moderation rules with no verdict, "policy/rule:stage,..." (records)
  // Moderation of the answer (output_moderation.h).
  bool moderates_answer = false;  // an attached policy has an output moderation rule
  ModerationEvents events;
  OutputModeration moderation;
  // A whole answer being judged (onAnswer): what is still out, and what it comes to.
  bool judging = false;
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
    if (answersInJson(ctx.endpoint)) st.quality.choose(st.policies);
    if (!request_targets && !st.quality.chosen()) return FilterStatus::Continue;
    if (ctx.endpoint == Endpoint::StoredResponse || ctx.endpoint == Endpoint::Models || ctx.endpoint == Endpoint::CountTokens)
      return FilterStatus::Continue;
    json::monotonic_resource arena(arena_, sizeof arena_);
    json::error_code ec;
    json::value body = json::parse(ctx.body, ec, &arena, requestDepth(ctx));
    if (ec) return FilterStatus::Continue;  // the router answered bad JSON already; nothing to look at
    if (!request_targets) {
      st.quality.takePrompt(ctx.endpoint, body);
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
    st.quality.takePrompt(ctx.endpoint, body);  // after the local redactions: what they masked never leaves
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
    st.events.filter = this;
    st.events.ctx = &ctx;
    return st.input_moderation.check(ctx, st.policies, texts, services_, st.events);
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
    return (st.quality.chosen() || st.moderates_answer) && !ctx.facts.stream;
  }

  FilterStatus onAnswer(RequestContext& ctx) override {
    GuardState& st = state(ctx);
    st.quality.clearVerdict();
    st.answer_blocked = false;
    st.answer_unchecked.reset();
    st.judged = FilterStatus::Continue;
    std::string text;                  // the quality check's
    std::vector<std::string> answered;  // the moderation's
    {
      json::monotonic_resource arena(arena_, sizeof arena_);
      json::error_code ec;
      json::value doc = readJson(*ctx.answer, ec, &arena);
      if (ec) return FilterStatus::Continue;
      std::vector<Text> texts;
      guardrail_texts::answerTexts(ctx.endpoint, doc, texts);
      for (const Text& t : texts)
        if (t.target == guardrails::kOutput && !t.text->empty()) {
          if (st.quality.chosen()) QualityCheck::appendText(text, *t.text);
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
    if (st.quality.chosen() && !text.empty()) {  // tool calls only: nothing to compare
      const GuardrailPolicyConfig* pol = st.quality.policy();
      const guardrails::RuleSpec* rule = st.quality.rule();
      st.quality.judgeAnswer(ctx, std::move(text), services_, metrics_, [this, &ctx, pol, rule](const QualityOutcome& q) {
        GuardState& s = state(ctx);
        if (q.verdict == "low") {
          verdict(ctx, s, *pol, rule->name, rule->action, "output");
          if (rule->action == Action::Block) {
            ctx.fail(Error{ErrorKind::ResponseQualityLow, "The answer was judged off-topic by guardrail rule \"" + pol->name + "/" + rule->name +
                                                             "\" (similarity " + s.quality.similarity() + ", below " + score(rule->quality.threshold) +
                                                             "); a retry is not likely to do better."});
            s.judged = FilterStatus::Stop;
          }
        }
        judgedPart(ctx, s);
      });
    }
    st.judging = false;
    if (st.quality.pending() || st.moderation.callsInFlight() > 0) return FilterStatus::Pause;
    return st.judged;
  }

  // One of a whole answer's checks answered: the answer goes on once none is out.
  void judgedPart(RequestContext& ctx, GuardState& st) {
    if (st.judging || st.quality.pending() || st.moderation.callsInFlight() > 0) return;
    ctx.resumer->resume(st.judged);
  }

  void requestFlagged(RequestContext& ctx, const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule) {
    verdict(ctx, state(ctx), pol, rule.name, rule.action, "input");
  }

  void requestUnchecked(RequestContext& ctx, const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule, std::string_view why) {
    unchecked(ctx, state(ctx), pol, rule, why, "input");
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
    st.streaming = ctx.streaming && (st.answer_targets || st.quality.chosen()) && answered;
    if (st.streaming && st.moderates_answer) {
      st.events.filter = this;
      st.events.ctx = &ctx;
      st.moderation.attach(st.policies, services_, st.events);
    }
    if (!ctx.response_headers) return;
    if (!st.verdicts.empty()) ctx.response_headers->emplace_back("x-tahua-guardrails", st.verdicts);
    st.quality.addHeader(*ctx.response_headers);
    // A refused answer: the SDKs' own retries would only pay for more of the same.
    if (ctx.error && ctx.error->kind == ErrorKind::ResponseQualityLow) ctx.response_headers->emplace_back("x-should-retry", "false");
  }

  void onComplete(RequestContext& ctx) override { state(ctx).quality.requestEnded(); }

  void onResponseBody(RequestContext& ctx, std::string& body) override {
    GuardState& st = state(ctx);
    if (!st.answer_targets || ctx.status < 200 || ctx.status >= 300 || ctx.error) return;
    json::monotonic_resource arena(arena_, sizeof arena_);
    json::error_code ec;
    json::value doc = readJson(body, ec, &arena);
    if (ec) {
      // An answer of the APIs that answer in JSON that is not JSON (or nests deeper than
      // any reader takes) cannot be checked: it is not given, as an unchecked moderation
      // rule that fails closed. Other endpoints may answer in other formats (audio).
      if (!answersInJson(ctx.endpoint)) return;
      const Error e{ErrorKind::UpstreamBadResponse, "The answer could not be checked by the guardrails: it is not JSON."};
      log::warn("guardrail answer refused", {{"request_id", ctx.request_id}, {"reason", "not JSON"}});
      ctx.fail(e);
      ctx.status = e.httpStatus();
      body = ctx.errorBody(e);
      return;
    }
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
      st.held.drop();
      return;
    }
    if (st.cut) {
      data.replace({});
      return;
    }
    st.out.clear();
    if (!st.blocked) {  // a moderation verdict may have blocked it since the last piece
      st.held.append(data.bytes());
      const bool last = data.last() && !st.ended;
      st.held.events(last, [&](std::size_t begin, std::size_t end) {
        event(ctx, st, begin, end);
        return !st.blocked;
      });
      if (last && !st.blocked) {
        st.ended = true;
        for (std::size_t c = 0; c < st.channels.size(); ++c) closeChannel(ctx, st, c);
      }
      scanAll(ctx, st);
    }
    if (!st.blocked) st.moderation.check(st.ended);
    if (!st.blocked) release(ctx, st);
    if (!st.blocked) st.held.forgetReleased();
    const bool waits = !st.blocked && st.moderation.busy(st.ended);
    // A streamed answer that ended normally: its quality checked without delaying anything.
    if (st.ended && !st.blocked && !waits)
      st.quality.checkStream(ctx, services_, metrics_, records_, [&ctx, &st](const std::string& tag) { appendVerdict(ctx, st, tag); });
    if (st.blocked) {
      // What is held back is dropped: it holds the match, or text the block cuts off.
      st.cut = true;
      st.held.drop();
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

  // The APIs whose answers and stream events are JSON with the model's text in them.
  static bool answersInJson(Endpoint e) {
    return e == Endpoint::ChatCompletions || e == Endpoint::Completions || e == Endpoint::Messages || e == Endpoint::Responses;
  }

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

  // Runs a channel's matchers over the text that arrived since they last ran.
  void scan(RequestContext& ctx, GuardState& st, std::size_t c) {
    Channel& ch = st.channels[c];
    if (ch.unscanned.empty()) return;
    for (auto& [p, stream] : ch.streams) {
      stream.feed(ch.unscanned, scratch_, hits_);
      onHits(ctx, st, ch, *st.policies[p], hits_);
    }
    ch.unscanned.clear();
  }

  void scanAll(RequestContext& ctx, GuardState& st) {
    for (std::size_t c : st.to_scan) {
      st.channels[c].queued = false;
      scan(ctx, st, c);
    }
    st.to_scan.clear();
  }

  void closeChannel(RequestContext& ctx, GuardState& st, std::size_t c) {
    Channel& ch = st.channels[c];
    if (ch.closed) return;
    scan(ctx, st, c);
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
        // One line is a view into the event; `joined` (an allocation) only from a second.
        if (lines++ == 0) {
          single = line;
        } else {
          if (lines == 2) joined.assign(single);
          joined += '\n';
          joined.append(line);
        }
      }
      at = nl + 1;
    }
    return lines == 1 ? single : std::string_view(joined);
  }

  // The event at [begin, end) of the stream, checked and held.
  void event(RequestContext& ctx, GuardState& st, std::size_t begin, std::size_t end) {
    HeldEvent ev{begin, end, {}, false};
    std::string joined;
    const std::string_view data = eventData(st.held.raw(ev), joined);
    // One text of the event into its channel's scanners; false when the stream stopped.
    auto feed = [&](unsigned channel, std::uint8_t target, std::string_view text) {
      const std::size_t c = channelOf(st, channel, target);
      if (c == kNoChannel) {
        stopUnchecked(ctx, st, "more than 256 choices, content blocks or tool calls");
        return false;
      }
      if (st.quality.chosen() && target == guardrails::kOutput) st.quality.streamed(text);
      Channel& ch = st.channels[c];
      const std::size_t begin = ch.size;
      ch.size += text.size();
      if (target == guardrails::kOutput) st.moderation.feed(c, text);
      ev.segments.push_back(Segment{c, begin, ch.size});
      if (!ch.streams.empty()) {
        ch.unscanned.append(text);
        if (!ch.queued) {
          ch.queued = true;
          st.to_scan.push_back(c);
        }
      }
      return true;
    };
    auto close = [&](unsigned base) {
      for (std::size_t c = 0; c < st.channels.size(); ++c)
        if (st.channels[c].id / 1024 == base / 1024) closeChannel(ctx, st, c);
    };
    // Data that is not an object cannot carry a checked text, but a client may read it
    // all the same: only "[DONE]" and no data at all pass unread (fail closed, as for an
    // event that is not JSON).
    const std::size_t lead = data.find_first_not_of(" \t\r\n");
    if (lead != std::string_view::npos && data[lead] != '{') {
      std::string_view rest = data.substr(lead);
      rest.remove_suffix(rest.size() - (rest.find_last_not_of(" \t\r\n") + 1));
      if (rest != "[DONE]") {
        stopUnchecked(ctx, st, "an event whose data is not a JSON object");
        return;
      }
    }
    if (lead != std::string_view::npos && data[lead] == '{') {
      // A one-line event's data lies in the held bytes, whose padding HeldEvents keeps.
      const bool padded = joined.empty();
      if (ctx.endpoint == Endpoint::ChatCompletions && guardrail_texts::chatEventTexts(data, padded, chat_texts_)) {
        // The usual chat chunk, read without a DOM (chat_event_texts.h).
        for (const auto& piece : chat_texts_.pieces)
          if (!feed(piece.channel, guardrails::kOutput, piece.text)) return;
        for (unsigned base : chat_texts_.closes) close(base);
      } else {
        // An event's DOM lives in this worker's buffer (no allocation for a usual event).
        json::monotonic_resource arena(arena_, sizeof arena_);
        json::error_code ec;
        json::value doc = readJson(data, ec, &arena);
        if (ec) {
          // Its texts cannot be read: the stream ends here, nothing held is sent.
          stopUnchecked(ctx, st, "an event that is not JSON");
          return;
        }
        guardrail_texts::EventTexts texts;
        guardrail_texts::eventTexts(ctx.endpoint, doc, texts);
        ev.full = texts.full;
        if (!texts.full)
          for (const Text& t : texts.pieces)
            if (!feed(t.channel, t.target, std::string_view(*t.text))) return;
        for (unsigned base : texts.closes) close(base);
      }
    }
    st.held.hold(std::move(ev));
    if (st.held.heldBytes() > kMaxHeldBytes) stopUnchecked(ctx, st, "more than 1 MiB of it waited on a match that never completed");
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
    using Release = HeldEvents::Release;
    st.held.release(
        st.out,
        [&](const HeldEvent& ev) {
          bool masked = false;
          for (const Segment& s : ev.segments) {
            const Channel& ch = st.channels[s.channel];
            if (s.end > std::min(ch.safeEnd(), st.moderation.gate(s.channel, st.ended))) return Release::Wait;
            for (const Redaction& r : ch.redactions)
              if (r.begin < s.end && r.end > s.begin) masked = true;
          }
          return masked || ev.full ? Release::Rewritten : Release::AsItCame;
        },
        [&](HeldEvent& ev, std::string&) {
          rewrite(ctx, st, ev);
          return !st.blocked;  // a whole text repeated in a done event held a blocked match
        });
  }

  void rewrite(RequestContext& ctx, GuardState& st, HeldEvent& ev) {
    std::string joined;
    json::error_code ec;
    json::value doc = readJson(eventData(st.held.raw(ev), joined), ec);
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
        st.out += st.held.raw(ev);
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
    const std::string_view raw = st.held.raw(ev);
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
  std::vector<RuleHit> hits_;         // a text's matches (its memory reused)
  guardrail_texts::ChatEventTexts chat_texts_;  // an event's texts read without a DOM
  alignas(16) unsigned char arena_[16384];
};

void ModerationEvents::requestFlagged(const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule) {
  filter->requestFlagged(*ctx, pol, rule);
}
void ModerationEvents::requestUnchecked(const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule, std::string_view why) {
  filter->requestUnchecked(*ctx, pol, rule, why);
}
void ModerationEvents::moderationFlagged(const OutputModeration::Rule& r) { filter->moderationFlagged(*ctx, r); }
void ModerationEvents::moderationUnchecked(const OutputModeration::Rule& r, std::string_view why) { filter->moderationUnchecked(*ctx, r, why); }
void ModerationEvents::moderationAnswered() { filter->moderationAnswered(*ctx); }

}  // namespace

std::unique_ptr<Filter> makeGuardrailFilter(WorkerMetrics& metrics, WorkerServices& services, PendingRecords& records) {
  return std::make_unique<GuardrailFilter>(metrics, services, records);
}

}  // namespace tahua
