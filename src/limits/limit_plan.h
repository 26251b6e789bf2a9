// The limits of one scope (a tenant, a key, a tenant x model, a model) as store checks:
// the counters' names, how each limits and what unit a request spends in it. Shared by
// the rate-limit filter (which charges them) and the admin API (which shows usage).
// Counter names carry the tenant (or model) as a Redis Cluster hash tag, so one
// tenant's counters share a slot and one script can touch them all.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "limits/limiters.h"

namespace tahua {

enum class LimitUnit : std::uint8_t { Requests, Tokens, MicroUsd };

struct PlannedLimit {
  std::string key;  // the counter's name in the store
  LimitSpec spec;
  LimitUnit unit = LimitUnit::Requests;
  std::string_view scope;  // tenant | key | subject | tenant_model | model
  std::string_view limit;  // requests_per_minute, tokens_per_minute, ...
  std::string limit_text;  // spec.limit in decimal: an x-ratelimit-limit-* value, formatted once
  mutable void* store_hint = nullptr;  // the in-process store's counter (LimitCheck::hint); per worker
};
using LimitPlan = std::vector<PlannedLimit>;

LimitPlan tenantLimits(const TenantConfig& tenant);
LimitPlan keyLimits(const ApiKeyConfig& key);
// One person's or service's limits (a jwt link's caller), counted per issuer and subject.
LimitPlan subjectLimits(const TenantConfig& tenant, std::string_view issuer, std::string_view subject, const LimitSet& limits);
LimitPlan tenantModelLimits(const TenantConfig& tenant, std::string_view model, const LimitSet& limits);
LimitPlan modelLimits(std::string_view model, const LimitSet& limits);
// Any scope: counters named `prefix`:<limit> (rate-limit policies build their own).
LimitPlan planLimits(const LimitSet& limits, const std::string& prefix, std::string_view scope);

}  // namespace tahua
