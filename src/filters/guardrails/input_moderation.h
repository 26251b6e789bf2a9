// Moderation of requests: the `moderation` rules on the request's text (their `inspect`
// targets), one call each to an endpoint in OpenAI's /v1/moderations shape
// (moderation_call.h), all at once, the request paused (onUpstreamSelect) until every
// call answered or timed out. A flagged verdict of a blocking rule refuses the request
// (400 content_blocked); no verdict refuses it under a fail-closed rule (503
// guardrail_unavailable). Per request, owned by the guardrail filter's state.
#pragma once

#include <string_view>
#include <vector>

#include "config/config.h"
#include "filters/filter.h"
#include "filters/guardrails/guarded_texts.h"
#include "guardrails/rule_set.h"
#include "http/outbound_call.h"

namespace tahua {

class WorkerServices;

class InputModeration {
 public:
  // What the guardrail filter does with the verdicts (records, counts, logs).
  class Handler {
   public:
    virtual void requestFlagged(const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule) = 0;
    // No verdict (an error, a timeout, an answer out of shape): the rule's on_error applies.
    virtual void requestUnchecked(const GuardrailPolicyConfig& pol, const guardrails::RuleSpec& rule, std::string_view why) = 0;

   protected:
    ~Handler() = default;
  };

  // The moderation rules' calls, with the request's text after the local redactions (what
  // the local rules masked never leaves the gateway). Continue at once when there are
  // none; else Pause until every call answered or timed out (then ctx.resumer).
  FilterStatus check(RequestContext& ctx, const std::vector<const GuardrailPolicyConfig*>& policies,
                     const std::vector<guardrail_texts::Text>& texts, WorkerServices& services, Handler& handler);

 private:
  void answered(RequestContext& ctx, Handler& handler, const GuardrailPolicyConfig& pol, std::size_t r, const OutboundResponse& res,
                std::size_t inputs);

  // Calls in flight for the request (onUpstreamSelect paused).
  int calls_ = 0;
  bool deciding_ = false, answered_ = false;
  FilterStatus answer_ = FilterStatus::Continue;
};

}  // namespace tahua
