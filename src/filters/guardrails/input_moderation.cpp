#include "filters/guardrails/input_moderation.h"

#include <boost/json/string.hpp>

#include <utility>

#include "filters/guardrails/moderation_call.h"
#include "filters/worker_services.h"

namespace tahua {

FilterStatus InputModeration::check(RequestContext& ctx, const std::vector<const GuardrailPolicyConfig*>& policies,
                                     const std::vector<guardrail_texts::Text>& texts, WorkerServices& services, Handler& handler) {
  deciding_ = true;
  answered_ = false;
  for (const GuardrailPolicyConfig* pol : policies) {
    const auto& rules = pol->rules->rules();
    for (std::size_t r = 0; r < rules.size(); ++r) {
      if (rules[r].detector != guardrails::RuleSpec::Detector::Moderation) continue;
      std::vector<std::string_view> input;
      for (const guardrail_texts::Text& t : texts)
        if ((t.target & rules[r].targets) && !t.text->empty()) input.emplace_back(*t.text);
      if (input.empty()) continue;
      auto call = guardrail_moderation::request(rules[r].moderation, input);
      if (!call) continue;  // checked when the config loaded
      ++calls_;
      services.fetch(std::move(*call), [this, &ctx, &handler, pol, r, n = input.size()](OutboundResponse res) {
        answered(ctx, handler, *pol, r, res, n);
      });
    }
  }
  deciding_ = false;
  if (calls_ == 0) return answered_ ? answer_ : FilterStatus::Continue;
  return FilterStatus::Pause;
}

void InputModeration::answered(RequestContext& ctx, Handler& handler, const GuardrailPolicyConfig& pol, std::size_t r,
                               const OutboundResponse& res, std::size_t inputs) {
  const auto& rule = pol.rules->rules()[r];
  const auto reading = guardrail_moderation::read(rule.moderation, res, inputs);
  if (reading.verdict == guardrail_moderation::Verdict::Flagged) {
    handler.requestFlagged(pol, rule);
    if (rule.action == guardrails::Action::Block && !answered_) {
      ctx.fail(Error{ErrorKind::ContentBlocked, "The request was blocked by guardrail rule \"" + pol.name + "/" + rule.name + "\"."});
      answered_ = true;
      answer_ = FilterStatus::Stop;
    }
  } else if (reading.verdict == guardrail_moderation::Verdict::None) {
    handler.requestUnchecked(pol, rule, reading.why);
    if (rule.moderation.fail_closed && !answered_) {
      ctx.fail(Error{ErrorKind::GuardrailUnavailable,
                     "The guardrail \"" + pol.name + "/" + rule.name + "\" could not check the request; please retry."});
      answered_ = true;
      answer_ = FilterStatus::Stop;
    }
  }
  if (--calls_ > 0) return;
  if (!deciding_) ctx.resumer->resume(answered_ ? answer_ : FilterStatus::Continue);
}

}  // namespace tahua
