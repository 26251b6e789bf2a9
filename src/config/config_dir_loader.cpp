// A config directory (a Kubernetes ConfigMap mount): top-level sections spread over
// files, plus tahua.dev/v1 resources (ModelRoute, RateLimitPolicy, PromptTemplate,
// Plugin, GuardrailPolicy).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/loader_detail.h"

namespace tahua::config_detail {

std::string slurp(const std::filesystem::path& p, bool& ok) {
  std::ifstream in(p, std::ios::binary);
  ok = static_cast<bool>(in);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

namespace {

// The directory's files with one of `extensions`, in name order.
std::vector<std::filesystem::path> filesOf(const std::string& dir, std::initializer_list<std::string_view> extensions) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    // Hidden entries include Kubernetes' ..data / ..2024_... ConfigMap internals.
    if (name.empty() || name.front() == '.') continue;
    const std::string ext = e.path().extension().string();
    if (std::find(extensions.begin(), extensions.end(), ext) == extensions.end()) continue;
    if (!std::filesystem::is_regular_file(e.path(), ec)) continue;  // follows symlinks
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::filesystem::path> yamlFiles(const std::string& dir) { return filesOf(dir, {".yaml", ".yml"}); }

using namespace schema;

constexpr Field kResourceFields[] = {
    string("apiVersion", "", "`tahua.dev/v1`.").needed(),
    choice("kind", "ModelRoute | RateLimitPolicy | PromptTemplate | Plugin | GuardrailPolicy", "",
           "What the spec is: a route, a rate-limit policy, a prompt template, a plugin, a guardrail policy.")
        .needed(),
    any("metadata", "",
        "Its `name` names the resource: a route's, a policy's or a plugin's name, a PromptTemplate's id (or "
        "`id@version`). Other keys (labels, annotations) are ignored.")
        .needed(),
    any("spec", "",
        "A mapping. ModelRoute: the fields of `routes[]` but `name`; RateLimitPolicy: those of a "
        "`rate_limits.policies[]` entry; PromptTemplate: a `prompts[]` entry's; Plugin: a `plugins[]` entry's; "
        "GuardrailPolicy: a `guardrails.policies[]` entry's; the name is always metadata.name.")
        .needed(),
};
// Resources come from a config directory, the Kubernetes API (kubernetes.resources) or
// the state store (the admin API): not from the config file's own sections.
const Table kResource("(resource)",
                      "A Kubernetes-style resource: a document of a config directory with `apiVersion: tahua.dev/v1`, "
                      "or an object of the Kubernetes API (`kubernetes.resources`); the state store keeps the same "
                      "kinds as `Kind/name` and a spec (/admin/v1/resources). A ModelRoute is appended after `routes`, "
                      "a policy after its section's own.",
                      kResourceFields);

struct Resource {
  std::string file, kind, name;
  YAML::Node spec;
};

}  // namespace

ConfigLoadResult loadConfigDir(const std::string& dir, bool listeners_optional) {
  ConfigLoadResult result;
  const auto files = yamlFiles(dir);
  if (files.empty()) {
    result.error = configError(dir, YAML::Mark::null_mark(), "", "no *.yaml or *.yml files in the config directory");
    return result;
  }
  SourceMap sources;
  YAML::Node root(YAML::NodeType::Map);
  std::vector<Resource> resources;
  for (const auto& path : files) {
    const std::string file = path.string();
    bool ok = false;
    const std::string text = slurp(path, ok);
    if (!ok) {
      result.error = configError(file, YAML::Mark::null_mark(), "", "cannot open file");
      return result;
    }
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
      result.error = configError(file, e.mark, "(yaml)", e.msg);
      return result;
    }
    for (const auto& doc : docs) {
      if (!doc.IsDefined() || doc.IsNull()) continue;
      if (!doc.IsMap()) {
        result.error = configError(file, doc.Mark(), "(root)", "expected a mapping");
        return result;
      }
      if (auto dup = duplicateKey(doc, file, "")) {
        result.error = std::move(*dup);
        return result;
      }
      if (doc["apiVersion"] || doc["kind"]) {
        // apiVersion: tahua.dev/v1, kind, metadata.name, spec.
        const auto bad = [&](const YAML::Node& n, const std::string& field, const std::string& msg) {
          result.error = configError(file, n.Mark(), field, msg);
        };
        for (const auto& kv : doc) {
          const std::string key = kv.first.as<std::string>();
          if (!kResource.find(key)) {
            std::string allowed;
            for (const Field& f : kResource.fields) allowed += (allowed.empty() ? "" : ", ") + std::string(f.name);
            bad(kv.first, key, "unknown field (allowed: " + allowed + ")");
            return result;
          }
        }
        if (!doc["apiVersion"] || !doc["apiVersion"].IsScalar() || doc["apiVersion"].Scalar() != "tahua.dev/v1") {
          bad(doc["apiVersion"] ? doc["apiVersion"] : doc, "apiVersion", "must be tahua.dev/v1");
          return result;
        }
        const std::string kind = doc["kind"] && doc["kind"].IsScalar() ? doc["kind"].Scalar() : "";
        if (!storedResourceKind(kind)) {
          bad(doc["kind"] ? doc["kind"] : doc, "kind",
              "unknown kind \"" + kind + "\" (ModelRoute | RateLimitPolicy | PromptTemplate | Plugin | GuardrailPolicy)");
          return result;
        }
        const YAML::Node meta = doc["metadata"];
        if (!meta || !meta.IsMap() || !meta["name"] || !meta["name"].IsScalar() || meta["name"].Scalar().empty()) {
          bad(meta ? meta : doc, "metadata.name", "required");
          return result;
        }
        if (!doc["spec"] || !doc["spec"].IsMap()) {
          bad(doc["spec"] ? doc["spec"] : doc, kind + "/" + meta["name"].Scalar() + ".spec", "required: a mapping");
          return result;
        }
        resources.push_back(Resource{file, kind, meta["name"].Scalar(), doc["spec"]});
        continue;
      }
      for (const auto& kv : doc) {
        const std::string key = kv.first.as<std::string>();
        if (auto it = sources.sections.find(key); it != sources.sections.end()) {
          result.error = configError(file, kv.first.Mark(), key,
                                     "already defined in " + it->second + " (each top-level section belongs to one file)");
          return result;
        }
        root[key] = kv.second;
        sources.sections[key] = file;
      }
    }
  }
  // ModelRoutes follow the plain `routes` list, in file order.
  YAML::Node routes = root["routes"] ? root["routes"] : YAML::Node(YAML::NodeType::Sequence);
  if (routes.IsSequence())
    for (std::size_t i = 0; i < routes.size(); ++i) {
      sources.routes.push_back(sources.sections.count("routes") ? sources.sections["routes"] : dir);
      sources.route_labels.emplace_back();
    }
  for (const auto& r : resources) {
    if (r.kind != "ModelRoute") continue;
    YAML::Node route = r.spec;  // not a clone: clones lose the line numbers errors need
    if (route["name"]) {
      result.error = configError(r.file, route["name"].Mark(), "ModelRoute/" + r.name + ".spec.name", "set metadata.name instead");
      return result;
    }
    route["name"] = r.name;
    routes.push_back(route);
    sources.routes.push_back(r.file);
    sources.route_labels.push_back("ModelRoute/" + r.name + ".spec");
  }
  if (routes.IsSequence() && routes.size() > 0) root["routes"] = routes;
  Loader loader(dir, &sources);
  loader.defer_policy_refs = true;  // RateLimitPolicy resources come after load()
  loader.listeners_optional = listeners_optional;
  try {
    Config cfg = loader.load(root);
    cfg.source = dir;
    for (const auto& r : resources)
      if (r.kind != "ModelRoute") loader.loadResource(r.spec, r.kind, r.name, r.file, cfg);
    loader.linkPolicyRefs(cfg);
    result.config = std::make_shared<const Config>(std::move(cfg));
    result.warnings = std::move(loader.warnings_);
  } catch (const ConfigFailure& f) {
    result.error = f.message;
  } catch (const YAML::Exception& e) {
    result.error = configError(dir, e.mark, "(yaml)", e.msg);
  }
  return result;
}

void Loader::loadResource(const YAML::Node& spec, const std::string& kind, const std::string& name,
                               const std::string& file, Config& cfg) {
  const std::string p = kind + "/" + name + ".spec";
  Loader in_file(file);
  if (kind == "Plugin") {
    in_file.plugin(spec, p, name, cfg);
    sortPlugins(cfg);
    return;
  }
  if (kind == "GuardrailPolicy") {
    GuardrailPolicyConfig pol = in_file.guardrailPolicy(spec, p, name, cfg);
    for (const auto& other : cfg.guardrails.policies)
      if (other.name == pol.name) in_file.fail(spec, p, "a policy named \"" + name + "\" exists (guardrails.policies)");
    cfg.guardrails.policies.push_back(std::move(pol));
    return;
  }
  if (kind == "RateLimitPolicy") {
    // Active: a policy like rate_limits.policies, named after the resource.
    RateLimitPolicyConfig pol = in_file.rateLimitPolicy(spec, p, cfg);
    pol.name = name;
    for (const auto& other : cfg.rate_limits.policies)
      if (other.name == pol.name) in_file.fail(spec, p, "a policy named \"" + name + "\" exists (rate_limits.policies)");
    cfg.rate_limits.policies.push_back(std::move(pol));
    return;
  }
  // PromptTemplate
  in_file.promptTemplate(spec, p, name, cfg);
}

}  // namespace tahua::config_detail

namespace tahua {

bool readConfigBytes(const std::string& path, std::string& out) {
  std::error_code ec;
  bool ok = false;
  if (!std::filesystem::is_directory(path, ec)) {
    out = config_detail::slurp(path, ok);
    return ok;
  }
  out.clear();
  // Plugins' Lua files too: an edited plugin is a changed config.
  for (const auto& f : config_detail::filesOf(path, {".yaml", ".yml", ".lua"})) {
    out += f.filename().string();
    out += '\0';
    out += config_detail::slurp(f, ok);
    if (!ok) return false;
    out += '\0';
  }
  return true;
}

}  // namespace tahua
