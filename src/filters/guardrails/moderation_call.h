// A moderation rule's call (guardrails::ModerationSpec: an endpoint in the shape of
// OpenAI's POST /v1/moderations) and the reading of its answer, shared by the request's
// check (input_moderation.cpp) and the answer's (output_moderation.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "guardrails/rule_set.h"
#include "http/outbound_call.h"

namespace tahua::guardrail_moderation {

// {model, input: [texts]} to the rule's URL, with its key and timeout; none when the URL
// does not parse (checked when the config loaded).
std::optional<OutboundRequest> request(const guardrails::ModerationSpec& mod, const std::vector<std::string_view>& texts);

enum class Verdict { Clean, Flagged, None };
struct Reading {
  Verdict verdict = Verdict::None;
  std::string why;  // None: what was wrong (never the texts)
};
// The endpoint's answer to a call with `inputs` texts: flagged when any result is (its
// own `flagged`, or a listed category's score at or above the threshold). Anything else
// than a 200 with one well-formed result per text is no verdict.
Reading read(const guardrails::ModerationSpec& mod, const OutboundResponse& res, std::size_t inputs);

}  // namespace tahua::guardrail_moderation
