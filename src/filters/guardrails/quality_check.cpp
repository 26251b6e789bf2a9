#include "filters/guardrails/quality_check.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cstdio>
#include <random>

#include "core/log.h"
#include "core/utf8.h"
#include "filters/guardrails/guarded_texts.h"
#include "filters/usage/pending_records.h"
#include "filters/worker_services.h"
#include "providers/embedding_call.h"
#include "telemetry/metrics.h"

namespace tahua {

namespace {

using guardrails::Action;

// The prompt and answer text the quality check embeds, each (about 4k tokens: within
// what embedding models take).
constexpr std::size_t kMaxQualityText = 16 << 10;

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

// The similarity as the records and the header give it.
std::string similarityText(double similarity) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", similarity);
  return buf;
}

// Counted and logged (never the texts), with or without the request.
void qualityCounted(WorkerMetrics& metrics, std::string_view request_id, const std::string& policy, const std::string& rule,
                    const QualityOutcome& q) {
  ++metrics.guardrail_quality[{policy, rule, std::string(q.verdict)}];
  if (q.verdict == "unchecked")
    log::warn("guardrail quality check gave no verdict", {{"request_id", request_id}, {"policy", policy}, {"rule", rule}, {"error", q.error}});
  else
    log::info("guardrail quality", {{"request_id", request_id}, {"policy", policy}, {"rule", rule}, {"verdict", q.verdict},
                                    {"similarity", q.similarity}});
}

}  // namespace

// A stream's quality check, answered after its request may have ended: what the answer
// needs then, with the request's context while it lives (onComplete clears it).
struct QualityCheck::Call {
  RequestContext* ctx = nullptr;
  QualityCheck* check = nullptr;
  std::function<void(const std::string& tag)> flagged;
  std::string request_id, record_key, policy, rule;
  double threshold = 0;
};

// The quality rule of the request: the first attached one that blocks, else the first
// that flags; checked for its `sample` share of requests.
void QualityCheck::choose(const std::vector<const GuardrailPolicyConfig*>& policies) {
  for (int want_block = 1; want_block >= 0 && !rule_; --want_block)
    for (const GuardrailPolicyConfig* pol : policies) {
      for (const auto& rule : pol->rules->rules())
        if (rule.detector == guardrails::RuleSpec::Detector::Quality && (rule.action == Action::Block) == (want_block == 1)) {
          policy_ = pol;
          rule_ = &rule;
          break;
        }
      if (rule_) break;
    }
  if (!rule_ || rule_->quality.sample >= 1) return;
  thread_local std::minstd_rand rng{std::random_device{}()};
  if (std::uniform_real_distribution<double>(0, 1)(rng) >= rule_->quality.sample) rule_ = nullptr;
}

// The last user message, which the quality check compares the answer with (none: no check).
void QualityCheck::takePrompt(Endpoint endpoint, boost::json::value& body) {
  if (!rule_) return;
  prompt_ = guardrail_texts::lastUserText(endpoint, body);
  if (prompt_.empty()) rule_ = nullptr;
  else if (prompt_.size() > kMaxQualityText) prompt_.resize(utf8Floor(prompt_, kMaxQualityText));
}

void QualityCheck::appendText(std::string& to, std::string_view text, bool separate) {
  if (to.size() >= kMaxQualityText) return;
  if (separate && !to.empty()) to += '\n';
  to.append(text.substr(0, utf8Floor(text, kMaxQualityText - std::min(to.size(), kMaxQualityText))));
}

// The prompt and `answer` embedded in one call to the rule's model (through the worker's
// upstream client); `done` gets its answer.
void QualityCheck::embed(WorkerServices& services, std::string answer, std::function<void(OutboundResponse)> done) const {
  const guardrails::QualitySpec& q = rule_->quality;
  services.callModel(q.embedding_model, Endpoint::Embeddings, embeddingRequestBody(q.embedding_model, {prompt_, std::move(answer)}),
                     Millis(q.timeout_ms), std::move(done));
}

void QualityCheck::judgeAnswer(RequestContext& ctx, std::string text, WorkerServices& services, WorkerMetrics& metrics,
                               std::function<void(const QualityOutcome&)> done) {
  pending_ = true;
  const GuardrailPolicyConfig* pol = policy_;
  const guardrails::RuleSpec* rule = rule_;
  embed(services, std::move(text), [this, &ctx, &metrics, pol, rule, done = std::move(done)](OutboundResponse res) {
    pending_ = false;
    const QualityOutcome q = judgeQuality(res, rule->quality.threshold);
    qualityCounted(metrics, ctx.request_id, pol->name, rule->name, q);
    set(ctx, q);
    done(q);
  });
}

void QualityCheck::set(RequestContext& ctx, const QualityOutcome& q) {
  verdict_ = q.verdict;
  similarity_.clear();
  if (q.verdict != "unchecked") similarity_ = similarityText(q.similarity);
  ctx.record_fields[static_cast<std::size_t>(RecordField::Quality)] = verdict_;
  ctx.record_fields[static_cast<std::size_t>(RecordField::QualitySimilarity)] = similarity_;
}

// A verdict in before the request ends goes into its records; a later one into
// PendingRecords (the usage record waits for it up to 2 s, else a second record carries it).
void QualityCheck::checkStream(RequestContext& ctx, WorkerServices& services, WorkerMetrics& metrics, PendingRecords& records,
                               std::function<void(const std::string& tag)> flagged) {
  if (!rule_ || answer_text_.empty() || call_) return;
  auto call = std::make_shared<Call>();
  call->ctx = &ctx;
  call->check = this;
  call->flagged = std::move(flagged);
  call->request_id = ctx.request_id;
  call->record_key = PendingRecords::keyOf(ctx.request_id, ctx.start);
  call->policy = policy_->name;
  call->rule = rule_->name;
  call->threshold = rule_->quality.threshold;
  call_ = call;
  verdict_ = "pending";
  ctx.record_fields[static_cast<std::size_t>(RecordField::Quality)] = verdict_;
  // Only worker-lived things are captured: the filter may be gone (a reload) by then.
  embed(services, std::move(answer_text_), [call, &metrics, &records](OutboundResponse res) {
    const QualityOutcome q = judgeQuality(res, call->threshold);
    qualityCounted(metrics, call->request_id, call->policy, call->rule, q);
    if (q.verdict == "low") {
      ++metrics.guardrail_actions[{call->policy, call->rule, std::string(guardrails::actionName(Action::Flag)), "output"}];
    }
    if (call->ctx) {
      call->check->set(*call->ctx, q);
      if (q.verdict == "low") call->flagged(call->policy + "/" + call->rule + ":flag");
      call->check->call_.reset();  // last: `call` is this closure's own copy
      return;
    }
    std::string fields = "\"quality\":\"" + std::string(q.verdict) + "\",\"quality_similarity\":";
    fields += q.verdict == "unchecked" ? std::string("null") : similarityText(q.similarity);
    records.settle(call->record_key, fields);
  });
}

void QualityCheck::requestEnded() {
  if (call_) {  // a stream's check still in flight: its verdict goes to PendingRecords
    call_->ctx = nullptr;
    call_->check = nullptr;
    call_->flagged = nullptr;
  }
}

void QualityCheck::addHeader(std::vector<std::pair<std::string_view, std::string_view>>& headers) {
  if (verdict_.empty()) return;
  header_ = similarity_.empty() ? verdict_ : verdict_ + "; similarity=" + similarity_;
  headers.emplace_back("x-tahua-quality", header_);
}

}  // namespace tahua
