// The answer-quality check (a `quality` rule; docs/guardrails.md "Answer quality"): the
// request's last user message and the answer's text embedded in one call to one of the
// gateway's models (providers/embedding_call.h), a cosine similarity below the rule's
// threshold a low answer. Per request, owned by the guardrail filter's state: the rule
// chosen, the prompt, a stream's text as it passed, the verdict (the records' fields,
// x-tahua-quality), and a stream's call in flight, which may answer after the request
// ended. The filter decides what a verdict does to the answer (flag, refuse).
#pragma once

#include <boost/json/fwd.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "guardrails/rule_set.h"
#include "http/outbound_call.h"
#include "request/request_context.h"

namespace tahua {

struct WorkerMetrics;
class PendingRecords;
class WorkerServices;

// A quality verdict: ok, low (below the threshold) or unchecked (no embeddings in time).
struct QualityOutcome {
  std::string_view verdict;
  double similarity = 0;
  std::string error;  // unchecked: why
};

class QualityCheck {
 public:
  QualityCheck() = default;
  QualityCheck(const QualityCheck&) = delete;
  QualityCheck& operator=(const QualityCheck&) = delete;

  // Picks the request's rule among the attached policies' (none: no check).
  void choose(const std::vector<const GuardrailPolicyConfig*>& policies);
  // Whether the request is checked: a rule chosen (and, once the prompt was taken, a prompt).
  bool chosen() const { return rule_ != nullptr; }
  const GuardrailPolicyConfig* policy() const { return policy_; }
  const guardrails::RuleSpec* rule() const { return rule_; }
  // The request's last user message (`body` after the local redactions); none: no check.
  void takePrompt(Endpoint endpoint, boost::json::value& body);

  // Appends a text (whole answers: texts on lines of their own), up to the bound.
  static void appendText(std::string& to, std::string_view text, bool separate = true);
  // A piece of a stream's output text, as it passes.
  void streamed(std::string_view piece) { appendText(answer_text_, piece, false); }

  // A whole answer's text (not empty), judged before it is sent: counted, logged and
  // recorded here; `done` then gets the outcome (on the worker's thread; it may run
  // before judgeAnswer returns).
  void judgeAnswer(RequestContext& ctx, std::string text, WorkerServices& services, WorkerMetrics& metrics,
                   std::function<void(const QualityOutcome&)> done);
  // A whole answer's check is out.
  bool pending() const { return pending_; }

  // A streamed answer that ended normally: checked without delaying anything. A low
  // verdict in while the request lives is handed to `flagged` (its "policy/rule:flag").
  void checkStream(RequestContext& ctx, WorkerServices& services, WorkerMetrics& metrics, PendingRecords& records,
                   std::function<void(const std::string& tag)> flagged);
  // The request completed (onComplete): a stream's check still in flight forgets it.
  void requestEnded();

  // The verdict so far ("" before one; "pending" while a stream's check is out) and its
  // similarity ("" when unchecked), as the records and x-tahua-quality give them.
  const std::string& verdict() const { return verdict_; }
  const std::string& similarity() const { return similarity_; }
  void clearVerdict() {
    verdict_.clear();
    similarity_.clear();
  }
  // x-tahua-quality, kept here while the headers (views) are written; none before a verdict.
  void addHeader(std::vector<std::pair<std::string_view, std::string_view>>& headers);

 private:
  struct Call;
  void embed(WorkerServices& services, std::string answer, std::function<void(OutboundResponse)> done) const;
  void set(RequestContext& ctx, const QualityOutcome& q);

  // One rule per request (a blocking one first), sampled in.
  const GuardrailPolicyConfig* policy_ = nullptr;
  const guardrails::RuleSpec* rule_ = nullptr;
  std::string prompt_;       // the last user message
  std::string answer_text_;  // a stream's text, as it passed
  std::string verdict_, similarity_;
  std::string header_;
  bool pending_ = false;
  std::shared_ptr<Call> call_;  // a stream's check in flight
};

}  // namespace tahua
