#include "limits/limit_plan.h"

#include <cmath>

namespace tahua {
namespace {

LimitPlan plan(const LimitSet& l, const std::string& prefix, std::string_view scope) {
  LimitPlan g;
  auto add = [&](std::int64_t limit, std::string_view suffix, LimitKind kind, LimitUnit unit, Calendar cal,
                 std::string_view name) {
    if (limit <= 0) return;
    PlannedLimit t;
    t.key = prefix + ":" + std::string(suffix);
    t.spec.kind = kind;
    t.spec.limit = limit;
    t.spec.period_ms = 60'000;
    t.spec.calendar = cal;
    t.unit = unit;
    t.scope = scope;
    t.limit = name;
    t.limit_text = std::to_string(limit);
    g.push_back(std::move(t));
  };
  add(l.requests_per_minute, "rpm", LimitKind::Window, LimitUnit::Requests, Calendar::Day, "requests_per_minute");
  add(l.tokens_per_minute, "tpm", LimitKind::Bucket, LimitUnit::Tokens, Calendar::Day, "tokens_per_minute");
  add(l.tokens_per_day, "tpd", LimitKind::Quota, LimitUnit::Tokens, Calendar::Day, "tokens_per_day");
  add(l.tokens_per_month, "tpmo", LimitKind::Quota, LimitUnit::Tokens, Calendar::Month, "tokens_per_month");
  add(static_cast<std::int64_t>(std::llround(l.usd_per_day * 1e6)), "usdd", LimitKind::Quota, LimitUnit::MicroUsd,
      Calendar::Day, "usd_per_day");
  add(static_cast<std::int64_t>(std::llround(l.usd_per_month * 1e6)), "usdm", LimitKind::Quota, LimitUnit::MicroUsd,
      Calendar::Month, "usd_per_month");
  return g;
}

std::string tenantTag(std::string_view tenant) { return "tahua:{t:" + std::string(tenant) + "}"; }

}  // namespace

LimitPlan planLimits(const LimitSet& limits, const std::string& prefix, std::string_view scope) {
  return plan(limits, prefix, scope);
}

LimitPlan tenantLimits(const TenantConfig& t) { return plan(t.limits, tenantTag(t.name) + ":tenant", "tenant"); }

LimitPlan keyLimits(const ApiKeyConfig& k) { return plan(k.limits, tenantTag(k.tenant) + ":key:" + k.name, "key"); }

LimitPlan subjectLimits(const TenantConfig& t, std::string_view issuer, std::string_view subject, const LimitSet& limits) {
  // In the tenant's slot; the subject is part of a counter's name, never a metric label.
  return plan(limits, tenantTag(t.name) + ":subject:" + std::string(issuer) + ":" + std::string(subject), "subject");
}

LimitPlan tenantModelLimits(const TenantConfig& t, std::string_view model, const LimitSet& limits) {
  return plan(limits, tenantTag(t.name) + ":model:" + std::string(model), "tenant_model");
}

LimitPlan modelLimits(std::string_view model, const LimitSet& limits) {
  return plan(limits, "tahua:{m:" + std::string(model) + "}:model", "model");
}

}  // namespace tahua
