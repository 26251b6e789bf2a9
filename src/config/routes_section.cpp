// routes: which requests go to which model, and their per-route limits and timeouts.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "config/loader_detail.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kRouteFields[] = {
    nonEmpty("name", "", "Unique; in the access log (`route_name`) and metrics. Default: `route-<index>`."),
    section("match", "What the request looks like; every matcher given must match (none: every request)."),
    section("when", "Features of the request and the time; every condition given must hold."),
    nonEmpty("target", "", "The model matching requests go to.").needed(),
    boolean("override", "false",
            "Also when the client named a configured model: required when `match.model` names one exactly (the load "
            "is refused otherwise); a pattern covering configured models matches only other names without it."),
    section("limits", "This route's own concurrency caps."),
    section("timeouts", "The same fields as `timeouts`, over the chosen provider's for the requests this route chose."),
    boolean("semantic_cache", "true", "false: the requests this route chose skip the semantic cache lookup."),
    nonEmpty("policyRef", "",
             "A rate_limits policy (or a RateLimitPolicy resource) for the requests this route chose: the route joins "
             "the policy's `match.route`."),
};
const Table kRoute("routes[]",
                   "A routing rule; routes are checked in order and the first match wins. A client naming a configured "
                   "model gets it unless a matching route says `override: true`.",
                   kRouteFields);

constexpr Field kMatchFields[] = {
    any("model", "",
        "The model the client asked for: a name, a shell pattern (`*`, `?`, `[...]`), or a list of them (not empty). "
        "Absent: every model."),
    nonEmpty("path", "", "The request path, exactly (starting with /)."),
    map("headers", "{}", "Header name (any case) to its exact value; `\"*\"`: the header is present."),
    map("query", "{}", "Query parameter to its exact value."),
    any("tenant", "", "The caller's tenant (authentication on): a name or a list of names (not empty)."),
    any("key", "", "The caller's key, by name: a name or a list of names (not empty)."),
};
const Table kMatch("routes[].match", "The route's matchers; exact model names are looked up in a hash index, so "
                   "thousands of routes cost a few lookups.",
                   kMatchFields);

constexpr Field kWhenFields[] = {
    integer("min_prompt_tokens", 0, 100'000'000, "",
            "The prompt's estimated tokens at least this (estimated only when a candidate route asks)."),
    integer("max_prompt_tokens", 0, 100'000'000, "", "The prompt's estimated tokens at most this."),
    boolean("has_tools", "", "The request defines tools (true), or defines none (false)."),
    string("hours", "", "A UTC time of day range, \"HH:MM-HH:MM\" (\"08:00-18:00\"); it may wrap midnight."),
};
const Table kWhen("routes[].when", "Cost-aware conditions: request features and the time of day.", kWhenFields);

constexpr Field kRouteLimitsFields[] = {
    integer("max_concurrent_requests", 0, 10'000'000, "0",
            "Requests this route chose in flight; over it: 429 concurrency_limit_exceeded (or a wait, as "
            "`limits.queue_timeout` says). 0: none."),
    integer("max_concurrent_streams", 0, 10'000'000, "0", "The same for streams."),
};
const Table kRouteLimits("routes[].limits", "The route's bulkheads, besides the gateway's `limits`.", kRouteLimitsFields);

RateLimitPolicyConfig* findPolicy(Config& cfg, const std::string& name) {
  for (auto& pol : cfg.rate_limits.policies)
    if (pol.name == name) return &pol;
  return nullptr;
}

}  // namespace

void Loader::loadRoutes(const YAML::Node& n, Config& cfg) {
  if (!n.IsSequence()) fail(n, "routes", "expected a list");
  for (std::size_t i = 0; i < n.size(); ++i) {
    const YAML::Node& y = n[i];
    const std::string p = "routes[" + std::to_string(i) + "]";
    Fields f(*this, y, p, kRoute);
    std::string name = "route-" + std::to_string(i);
    f.read("name", name);
    loadRoute(y, p, std::move(name), cfg);
  }
}

void Loader::loadModelRoute(const YAML::Node& spec, const std::string& p, const std::string& name, Config& cfg) {
  if (spec["name"]) fail(spec["name"], p + ".name", "the name is the resource's (Kind/name), not a field");
  std::vector<std::string_view> fields;  // a route's but its name
  for (const Field& f : kRouteFields)
    if (f.name != "name") fields.push_back(f.name);
  checkKeys(spec, p, std::span<const std::string_view>(fields));
  loadRoute(spec, p, name, cfg);  // appended only when valid
}

// One route, checked whole before it is appended (a failure leaves `cfg` as it was).
void Loader::loadRoute(const YAML::Node& y, const std::string& p, std::string name, Config& cfg) {
  {
    Fields f(*this, y, p, kRoute);
    RouteConfig r;
    r.name = std::move(name);
    for (const auto& other : cfg.routes)
      if (other.name == r.name) fail(y["name"] ? y["name"] : y, p + ".name", "duplicate route name \"" + r.name + "\"");
    if (!y["target"]) fail(y, p + ".target", "required: the model to send matching requests to");
    f.read("target", r.target);
    auto it = cfg.model_index.find(r.target);
    if (it == cfg.model_index.end()) fail(y["target"], p + ".target", "unknown model \"" + r.target + "\"");
    r.target_index = it->second;
    f.read("override", r.override_model);
    if (auto t = f["timeouts"]) r.timeouts = timeoutOverrides(t, f.at("timeouts"));
    f.read("semantic_cache", r.semantic_cache);
    if (auto l = f["limits"]) {
      Fields lf(*this, l, f.at("limits"), kRouteLimits);
      lf.read("max_concurrent_requests", r.max_concurrent_requests);
      lf.read("max_concurrent_streams", r.max_concurrent_streams);
    }
    if (auto m = f["match"]) {
      Fields mf(*this, m, f.at("match"), kMatch);
      const std::string mp = mf.path();
      // The caller (auth on): a tenant or key name, or a list of them. Admin-created
      // tenants and keys count too, so the names are not checked against the file.
      for (auto [field, out] : {std::pair<const char*, std::vector<std::string>*>{"tenant", &r.tenants}, {"key", &r.keys}}) {
        if (auto v = mf[field]) {
          if (v.IsSequence()) {
            if (v.size() == 0) fail(v, mp + "." + field, "must not be an empty list");
            for (std::size_t k = 0; k < v.size(); ++k) out->push_back(nonEmpty(v[k], mp + "." + field + "[" + std::to_string(k) + "]"));
          } else {
            out->push_back(nonEmpty(v, mp + "." + field));
          }
        }
      }
      if (auto v = mf["model"]) {
        std::vector<std::string> list;
        if (v.IsSequence()) {
          if (v.size() == 0) fail(v, mp + ".model", "must not be an empty list (omit it to match every model)");
          for (std::size_t k = 0; k < v.size(); ++k) list.push_back(nonEmpty(v[k], mp + ".model[" + std::to_string(k) + "]"));
        }
        else
          list.push_back(nonEmpty(v, mp + ".model"));
        for (auto& name : list) {
          if (name.find_first_of("*?[") != std::string::npos) {
            r.model_globs.push_back(std::move(name));
          } else {
            if (cfg.model_index.count(name) && !r.override_model)
              fail(v, mp + ".model", "\"" + name + "\" is a configured model, which clients reach directly, so this "
                                     "route would never apply to it; add override: true to the route to send its "
                                     "requests to \"" + r.target + "\" instead");
            r.models.push_back(std::move(name));
          }
        }
      }
      if (mf.read("path", r.path) && r.path.front() != '/') fail(m["path"], mp + ".path", "must start with /");
      for (auto [key, out] : {std::pair<const char*, std::vector<std::pair<std::string, std::string>>*>{"headers", &r.headers},
                              {"query", &r.query}}) {
        if (auto h = mf[key]) {
          if (!h.IsMap()) fail(h, mp + "." + key, "expected a mapping of name to value");
          for (const auto& kv : h) {
            std::string name = str(kv.first, mp + "." + key);
            if (std::string_view(key) == "headers")
              for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            out->emplace_back(std::move(name), str(kv.second, mp + "." + key + "." + str(kv.first, mp)));
          }
        }
      }
    }
    if (auto w = f["when"]) {
      Fields wf(*this, w, f.at("when"), kWhen);
      wf.read("min_prompt_tokens", r.min_prompt_tokens);
      wf.read("max_prompt_tokens", r.max_prompt_tokens);
      if (bool tools = false; wf.read("has_tools", tools)) r.has_tools = tools ? 1 : 0;
      if (std::string h; wf.read("hours", h)) {
        // "HH:MM-HH:MM" in UTC.
        int a = 0, b = 0, c = 0, d = 0;
        char tail = 0;
        bool shape = h.size() == 11 && h[2] == ':' && h[5] == '-' && h[8] == ':';
        for (std::size_t k : {0, 1, 3, 4, 6, 7, 9, 10}) shape = shape && k < h.size() && std::isdigit(static_cast<unsigned char>(h[k]));
        if (!shape || std::sscanf(h.c_str(), "%2d:%2d-%2d:%2d%c", &a, &b, &c, &d, &tail) != 4 || a > 24 || c > 24 || b > 59 || d > 59 ||
            a * 60 + b > 1440 || c * 60 + d > 1440 || a * 60 + b == c * 60 + d)
          fail(w["hours"], wf.at("hours"), "expected a UTC range \"HH:MM-HH:MM\", e.g. \"08:00-18:00\"");
        r.from_minute = a * 60 + b;
        r.to_minute = c * 60 + d;
      }
    }
    if (r.min_prompt_tokens >= 0 && r.max_prompt_tokens >= 0 && r.min_prompt_tokens > r.max_prompt_tokens)
      fail(y["when"], p + ".when.min_prompt_tokens", "must not exceed max_prompt_tokens (the route could never match)");
    const auto index = static_cast<std::uint32_t>(cfg.routes.size());
    if (f.read("policyRef", r.policy_ref)) {
      const YAML::Node v = y["policyRef"];
      if (link_refs_now) {
        auto* pol = findPolicy(cfg, r.policy_ref);
        if (!pol) fail(v, p + ".policyRef", "unknown RateLimitPolicy \"" + r.policy_ref + "\"");
        pol->routes.push_back(r.name);
      } else {
        pending_refs_.push_back({index, v, p + ".policyRef"});
      }
    }
    if (r.models.empty() || !r.model_globs.empty()) cfg.routes_any_model.push_back(index);
    for (const auto& name : r.models) {
      auto& list = cfg.routes_by_model[name];
      if (list.empty() || list.back() != index) list.push_back(index);
    }
    cfg.routes.push_back(std::move(r));
  }
}

void Loader::linkPolicyRefs(Config& cfg) {
  for (const PendingRef& ref : pending_refs_) {
    const RouteConfig& r = cfg.routes[ref.route];
    auto* pol = findPolicy(cfg, r.policy_ref);
    if (!pol) fail(ref.node, ref.field, "unknown RateLimitPolicy \"" + r.policy_ref + "\" (rate_limits.policies or a RateLimitPolicy resource)");
    if (std::find(pol->routes.begin(), pol->routes.end(), r.name) == pol->routes.end()) pol->routes.push_back(r.name);
  }
  pending_refs_.clear();
}

}  // namespace tahua::config_detail
