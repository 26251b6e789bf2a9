// routes: which requests go to which model, and their per-route limits and timeouts.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "config/loader_detail.h"

namespace tahua::config_detail {

namespace {

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
    checkKeys(y, p, {"name", "match", "when", "target", "override", "limits", "timeouts", "semantic_cache", "policyRef"});
    loadRoute(y, p, y["name"] ? nonEmpty(y["name"], p + ".name") : "route-" + std::to_string(i), cfg);
  }
}

// One route, checked whole before it is appended (a failure leaves `cfg` as it was).
void Loader::loadRoute(const YAML::Node& y, const std::string& p, std::string name, Config& cfg) {
  {
    RouteConfig r;
    r.name = std::move(name);
    for (const auto& other : cfg.routes)
      if (other.name == r.name) fail(y["name"] ? y["name"] : y, p + ".name", "duplicate route name \"" + r.name + "\"");
    if (!y["target"]) fail(y, p + ".target", "required: the model to send matching requests to");
    r.target = nonEmpty(y["target"], p + ".target");
    auto it = cfg.model_index.find(r.target);
    if (it == cfg.model_index.end()) fail(y["target"], p + ".target", "unknown model \"" + r.target + "\"");
    r.target_index = it->second;
    if (auto v = y["override"]) r.override_model = boolean(v, p + ".override");
    if (auto t = y["timeouts"]) r.timeouts = timeoutOverrides(t, p + ".timeouts");
    if (auto v = y["semantic_cache"]) r.semantic_cache = boolean(v, p + ".semantic_cache");
    if (auto l = y["limits"]) {
      checkKeys(l, p + ".limits", {"max_concurrent_requests", "max_concurrent_streams"});
      if (auto v = l["max_concurrent_requests"])
        r.max_concurrent_requests = integer(v, p + ".limits.max_concurrent_requests", 0, 10'000'000);
      if (auto v = l["max_concurrent_streams"])
        r.max_concurrent_streams = integer(v, p + ".limits.max_concurrent_streams", 0, 10'000'000);
    }
    if (auto m = y["match"]) {
      const std::string mp = p + ".match";
      checkKeys(m, mp, {"model", "path", "headers", "query", "tenant", "key"});
      // The caller (auth on): a tenant or key name, or a list of them. Admin-created
      // tenants and keys count too, so the names are not checked against the file.
      for (auto [field, out] : {std::pair<const char*, std::vector<std::string>*>{"tenant", &r.tenants}, {"key", &r.keys}}) {
        if (auto v = m[field]) {
          if (v.IsSequence()) {
            if (v.size() == 0) fail(v, mp + "." + field, "must not be an empty list");
            for (std::size_t k = 0; k < v.size(); ++k) out->push_back(nonEmpty(v[k], mp + "." + field + "[" + std::to_string(k) + "]"));
          } else {
            out->push_back(nonEmpty(v, mp + "." + field));
          }
        }
      }
      if (auto v = m["model"]) {
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
      if (auto v = m["path"]) {
        r.path = nonEmpty(v, mp + ".path");
        if (r.path.front() != '/') fail(v, mp + ".path", "must start with /");
      }
      for (auto [key, out] : {std::pair<const char*, std::vector<std::pair<std::string, std::string>>*>{"headers", &r.headers},
                              {"query", &r.query}}) {
        if (auto h = m[key]) {
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
    if (auto w = y["when"]) {
      const std::string wp = p + ".when";
      checkKeys(w, wp, {"min_prompt_tokens", "max_prompt_tokens", "has_tools", "hours"});
      if (auto v = w["min_prompt_tokens"]) r.min_prompt_tokens = static_cast<std::int64_t>(integer(v, wp + ".min_prompt_tokens", 0, 100'000'000));
      if (auto v = w["max_prompt_tokens"]) r.max_prompt_tokens = static_cast<std::int64_t>(integer(v, wp + ".max_prompt_tokens", 0, 100'000'000));
      if (auto v = w["has_tools"]) r.has_tools = boolean(v, wp + ".has_tools") ? 1 : 0;
      if (auto v = w["hours"]) {
        // "HH:MM-HH:MM" in UTC.
        const std::string h = str(v, wp + ".hours");
        int a = 0, b = 0, c = 0, d = 0;
        char tail = 0;
        bool shape = h.size() == 11 && h[2] == ':' && h[5] == '-' && h[8] == ':';
        for (std::size_t k : {0, 1, 3, 4, 6, 7, 9, 10}) shape = shape && k < h.size() && std::isdigit(static_cast<unsigned char>(h[k]));
        if (!shape || std::sscanf(h.c_str(), "%2d:%2d-%2d:%2d%c", &a, &b, &c, &d, &tail) != 4 || a > 24 || c > 24 || b > 59 || d > 59 ||
            a * 60 + b > 1440 || c * 60 + d > 1440 || a * 60 + b == c * 60 + d)
          fail(v, wp + ".hours", "expected a UTC range \"HH:MM-HH:MM\", e.g. \"08:00-18:00\"");
        r.from_minute = a * 60 + b;
        r.to_minute = c * 60 + d;
      }
    }
    if (r.min_prompt_tokens >= 0 && r.max_prompt_tokens >= 0 && r.min_prompt_tokens > r.max_prompt_tokens)
      fail(y["when"], p + ".when.min_prompt_tokens", "must not exceed max_prompt_tokens (the route could never match)");
    const auto index = static_cast<std::uint32_t>(cfg.routes.size());
    if (auto v = y["policyRef"]) {
      r.policy_ref = nonEmpty(v, p + ".policyRef");
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
