// The `guardrails` section and GuardrailPolicy resources (guardrails_section.cpp):
// policies of content rules, compiled when the config loads.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace tahua {

namespace guardrails {
class RuleSet;  // guardrails/rule_set.h
}

// A guardrail policy (`guardrails.policies`, GuardrailPolicy resources): content rules
// for the requests it is attached to (docs/guardrails.md). Its rules are compiled once,
// when the config is loaded, and shared read-only by every worker.
struct GuardrailPolicyConfig {
  std::string name;
  // Attached to: requests whose model (as asked or as routed), route, tenant and key are
  // in every list given; no list = every request.
  std::vector<std::string> models, routes, tenants, keys;
  std::shared_ptr<const guardrails::RuleSet> rules;
  std::string fingerprint;  // a digest of its definition: a kept answer names the policies that shaped it
};

struct GuardrailsConfig {
  std::vector<GuardrailPolicyConfig> policies;  // guardrails.policies, then GuardrailPolicy resources
};

}  // namespace tahua
