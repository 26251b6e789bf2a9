// Whether a guardrail policy is attached to a request: its model (as asked or as routed),
// its route, its tenant and its key are in every list the policy gives. Shared by the
// guardrail filter and the response cache (whose key names the answer guardrails that
// shaped a kept answer, so a hit never skips a policy the request is under).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "request/request_context.h"

namespace tahua {

inline bool guardrailPolicyApplies(const GuardrailPolicyConfig& pol, const RequestContext& ctx) {
  const auto listed = [](const std::vector<std::string>& list, std::string_view v) {
    return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
  };
  const std::string_view asked = ctx.facts.model;
  const std::string_view routed = ctx.model ? std::string_view(ctx.model->name) : asked;
  const std::string_view tenant = ctx.principal.tenant ? std::string_view(ctx.principal.tenant->name) : "";
  const std::string_view key = ctx.principal.key ? std::string_view(ctx.principal.key->name) : "";
  return pol.rules && (listed(pol.models, asked) || listed(pol.models, routed)) && listed(pol.routes, ctx.route_name) &&
         listed(pol.tenants, tenant) && listed(pol.keys, key);
}

}  // namespace tahua
