// The `routes` section (routes_section.cpp) and ModelRoute resources: which requests go
// to which model, and their per-route caps, timeouts and rate-limit policy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/provider_config.h"

namespace tahua {

// A declarative route: requests that match go to `target` (a model, i.e. a group of
// deployments). Checked in config order; the first match wins. A client that names a
// configured model gets that model unless a matching route says `override: true`.
struct RouteConfig {
  std::string name;
  // Matchers (all given ones must match).
  std::vector<std::string> models;       // exact client model names
  std::vector<std::string> model_globs;  // shell patterns: gpt-4*, claude-?-opus
  std::string path;                      // exact request path; empty = any
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case name, exact value ("*": present)
  std::vector<std::pair<std::string, std::string>> query;    // name, exact value
  std::vector<std::string> tenants;  // the caller's tenant is one of these (auth on)
  std::vector<std::string> keys;     // the caller's key (by name) is one of these
  // Request features (cost-aware routing); -1 / unset = any.
  std::int64_t min_prompt_tokens = -1;
  std::int64_t max_prompt_tokens = -1;
  int has_tools = -1;                    // 0 / 1
  int from_minute = -1, to_minute = -1;  // UTC time of day [from, to); may wrap midnight
  std::string target;
  std::size_t target_index = 0;
  bool override_model = false;
  // Concurrency caps of the requests this route chose (0 = none); see LimitsConfig.
  std::size_t max_concurrent_requests = 0;
  std::size_t max_concurrent_streams = 0;
  TimeoutOverrides timeouts;  // over the chosen provider's, for requests this route chose
  bool semantic_cache = true;  // false: requests this route chose skip the semantic lookup
  // A RateLimitPolicy that applies to the requests this route chose (added to the
  // policy's match.route when the config is loaded).
  std::string policy_ref;
  bool needsFeatures() const { return min_prompt_tokens >= 0 || max_prompt_tokens >= 0 || has_tools >= 0; }
};

}  // namespace tahua
