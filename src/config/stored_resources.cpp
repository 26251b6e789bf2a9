// Resources from the state store over the config file's (see applyStoredResources in
// config.h). The precedence is the file's, then the store's: the file is what GitOps
// reviews, so a resource it declares is never replaced at run time.
#include <algorithm>

#include "config/loader_detail.h"

namespace tahua {

bool storedResourceKind(std::string_view kind) {
  return kind == "ModelRoute" || kind == "RateLimitPolicy" || kind == "PromptTemplate" || kind == "Plugin" || kind == "GuardrailPolicy";
}

bool storedResourceName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  // One '@' at most, not first: a PromptTemplate's "id@version".
  const auto at = name.find('@');
  if (at == 0 || (at != std::string_view::npos && name.find('@', at + 1) != std::string_view::npos)) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '@';
  });
}

bool declaredInFile(const Config& base, std::string_view kind, std::string_view name) {
  const auto named = [&](const auto& list, auto field) {
    return std::any_of(list.begin(), list.end(), [&](const auto& x) { return x.*field == name; });
  };
  if (kind == "ModelRoute") return named(base.routes, &RouteConfig::name);
  if (kind == "RateLimitPolicy") return named(base.rate_limits.policies, &RateLimitPolicyConfig::name);
  if (kind == "GuardrailPolicy") return named(base.guardrails.policies, &GuardrailPolicyConfig::name);
  if (kind == "Plugin") return named(base.plugins, &PluginConfig::id);
  if (kind == "PromptTemplate") {
    // "id@version" names one version; "id" alone every version of it.
    const auto at = name.find('@');
    const std::string_view id = name.substr(0, at), version = at == std::string_view::npos ? "" : name.substr(at + 1);
    return std::any_of(base.prompts.begin(), base.prompts.end(),
                       [&](const PromptTemplateConfig& x) { return x.id == id && (version.empty() || x.version == version); });
  }
  return false;
}

StoredResourcesResult applyStoredResources(const ConfigPtr& base, const std::vector<StoredResource>& resources) {
  using namespace config_detail;
  StoredResourcesResult out;
  if (resources.empty()) {
    out.config = base;
    return out;
  }
  std::vector<const StoredResource*> order;
  for (const auto& r : resources) order.push_back(&r);
  // ModelRoutes last, so a route's policyRef finds the policies of every source; each
  // group in id order.
  const auto route = [](const StoredResource* r) { return r->id.rfind("ModelRoute/", 0) == 0; };
  std::sort(order.begin(), order.end(), [&](const auto* a, const auto* b) {
    return route(a) != route(b) ? route(b) : a->id < b->id;
  });
  auto cfg = std::make_shared<Config>(*base);
  for (const StoredResource* r : order) {
    const auto slash = r->id.find('/');
    const std::string kind = r->id.substr(0, slash == std::string::npos ? 0 : slash);
    const std::string name = slash == std::string::npos ? "" : r->id.substr(slash + 1);
    const std::string source = (r->origin.empty() ? std::string("store resource") : r->origin) + " " + r->id;
    if (!storedResourceKind(kind) || !storedResourceName(name)) {
      out.rejected.emplace_back(r->id, source + ": expected Kind/name (ModelRoute | RateLimitPolicy | PromptTemplate | Plugin | GuardrailPolicy; "
                                                "a name of letters, digits, '-', '_', '.', and a PromptTemplate's '@version')");
      continue;
    }
    if (declaredInFile(*base, kind, name)) {
      out.warnings.push_back(source + " is not applied: the config file declares it, and the file wins");
      continue;
    }
    Loader loader(source);
    loader.link_refs_now = true;
    try {
      YAML::Node spec = YAML::Load(r->spec);
      if (auto dup = duplicateKey(spec, source, "spec")) {
        out.rejected.emplace_back(r->id, *dup);
        continue;
      }
      const std::string p = kind + "/" + name + ".spec";
      if (!spec.IsMap()) loader.fail(spec, p, "expected a mapping (the resource's spec, as JSON)");
      if (kind == "ModelRoute") {
        loader.loadModelRoute(spec, p, name, *cfg);  // appended only when valid
      } else {
        // A stored plugin carries its code: a path would read this replica's files.
        if (kind == "Plugin" && spec["file"]) loader.fail(spec["file"], p + ".file", "a stored plugin carries its code in `source`");
        loader.loadResource(spec, kind, name, source, *cfg);
      }
      for (auto& w : loader.warnings_) out.warnings.push_back(std::move(w));
    } catch (const ConfigFailure& f) {
      out.rejected.emplace_back(r->id, f.message);
    } catch (const YAML::Exception& e) {
      out.rejected.emplace_back(r->id, configError(source, e.mark, "(json)", e.msg));
    }
  }
  out.config = std::move(cfg);
  return out;
}

}  // namespace tahua
