// `prompts:` entries and `PromptTemplate` resources: a template's messages cut at their
// `{{variable}}` placeholders, its variables typed, its defaults checked, so a template
// that names a variable it does not declare is a config error, not a request's surprise.
#include <algorithm>
#include <charconv>

#include <boost/json.hpp>

#include "config/loader_detail.h"
#include "core/json_read.h"

namespace tahua {

bool promptVersionLess(std::string_view a, std::string_view b) {
  const auto number = [](std::string_view s, std::uint64_t& out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && !s.empty();
  };
  std::uint64_t x = 0, y = 0;
  if (number(a, x) && number(b, y)) return x < y;
  return a < b;
}

const PromptTemplateConfig* Config::findPrompt(std::string_view id, std::string_view version) const {
  const PromptTemplateConfig* best = nullptr;
  for (const auto& t : prompts) {
    if (t.id != id) continue;
    if (version.empty() || version == "latest") {
      if (!best || promptVersionLess(best->version, t.version)) best = &t;
    } else if (t.version == version) {
      return &t;
    }
  }
  return best;
}

namespace config_detail {

namespace {

using namespace schema;

constexpr Field kPromptFields[] = {
    nonEmpty("id", "",
             "Letters, digits, '-', '_', '.'; at most 64 (a PromptTemplate resource: its name, `id` or `id@version`).")
        .needed(),
    nonEmpty("version", "\"1\"",
             "At most 64 characters, not \"latest\"; a request without a version gets the greatest (numeric when both "
             "are numbers)."),
    nonEmpty("model", "", "The model when the request names none."),
    map("parameters", "{}", "Request fields set when the request does not set them (temperature, max_tokens, ...)."),
    any("variables", "[]",
        "A list of names (strings, required), or a mapping of name to {type, required, default, enum}; at most 64."),
    list("messages", "",
         "The template's messages ({role, content} with {{variable}} placeholders), before the request's own; at most "
         "64. Required, unless `template`."),
    nonEmpty("template", "", "The older single-text form: one user message; instead of messages."),
};
const Table kPrompt("prompts[]",
                    "A prompt template (docs/prompt-templates.md); the same fields, without `id`, make a PromptTemplate "
                    "resource's spec.",
                    kPromptFields);

constexpr Field kVariableFields[] = {
    choice("type", "string | number | integer | boolean", "string", "The value's JSON type; another is 400 invalid_prompt."),
    boolean("required", "true", "A request must give it; false: it may be left out (it renders as empty text)."),
    any("default", "", "A scalar of the type, used when the request gives none (the variable is then not required)."),
    list("enum", "", "type string: the values allowed."),
};
const Table kVariable("prompts[].variables.*", "A typed variable.", kVariableFields);

constexpr Field kMessageFields[] = {
    choice("role", "system | developer | user | assistant", "", "The message's role.").needed(),
    string("content", "", "The text, with {{variable}} placeholders.").needed(),
};
const Table kMessage("prompts[].messages[]", "One of the template's messages.", kMessageFields);

constexpr std::size_t kMaxPrompts = 1024;
constexpr std::size_t kMaxMessages = 64;
constexpr std::size_t kMaxVariables = 64;

bool validPromptId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.')) return false;
  return id.front() != '.' && id.front() != '-';
}

bool variableName(std::string_view n) {
  if (n.empty() || n.size() > 64 || !(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
  return std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; });
}

const char* typeName(PromptVariable::Type t) {  // with its article
  switch (t) {
    case PromptVariable::Type::String: return "a string";
    case PromptVariable::Type::Number: return "a number";
    case PromptVariable::Type::Integer: return "an integer";
    case PromptVariable::Type::Boolean: return "a boolean";
  }
  return "a string";
}

}  // namespace

void Loader::loadPrompts(const YAML::Node& n, Config& cfg) {
  if (!n.IsSequence()) fail(n, "prompts", "expected a list of prompt templates");
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string p = "prompts[" + std::to_string(i) + "]";
    if (!n[i]["id"]) fail(n[i], p + ".id", "required");
    promptTemplate(n[i], p, nonEmpty(n[i]["id"], p + ".id"), cfg);
  }
}

void Loader::promptTemplate(const YAML::Node& y, const std::string& p, const std::string& name, Config& cfg) {
  const bool resource = !y["id"];
  // A `prompts:` entry or a PromptTemplate resource's spec (no `id`: its name is the id).
  Fields f(*this, y, p, kPrompt);
  PromptTemplateConfig t;
  t.origin = fileOf(p);
  // The name: "id" (its version in spec.version) or "id@version".
  const auto at = name.find('@');
  t.id = name.substr(0, at);
  const YAML::Node where = resource ? y : y["id"];
  const std::string where_path = resource ? p : p + ".id";
  if (!validPromptId(t.id)) fail(where, where_path, "\"" + t.id + "\" is not a prompt id (letters, digits, '-', '_', '.'; at most 64)");
  f.read("version", t.version);
  if (at != std::string::npos) {
    const std::string named = name.substr(at + 1);
    if (named.empty()) fail(where, where_path, "\"" + name + "\": a version is expected after '@'");
    if (y["version"] && named != t.version) fail(y["version"], p + ".version", "the name says version " + named);
    t.version = named;
  }
  if (t.version.size() > 64 || t.version == "latest" || t.version.find_first_of("@/ ") != std::string::npos)
    fail(y["version"] ? y["version"] : where, p + ".version", "\"" + t.version + "\" is not a version (at most 64 characters; not \"latest\")");
  t.label = t.id + "@" + t.version;
  for (const auto& other : cfg.prompts)
    if (other.id == t.id && other.version == t.version) fail(where, where_path, "prompt " + t.label + " is declared twice");
  if (cfg.prompts.size() >= kMaxPrompts) fail(y, p, "at most " + std::to_string(kMaxPrompts) + " prompt templates");
  f.read("model", t.model);

  if (auto ps = f["parameters"]) {
    if (!ps.IsMap()) fail(ps, p + ".parameters", "expected a mapping of request fields to values");
    for (const auto& kv : ps) {
      const std::string k = kv.first.as<std::string>();
      const std::string kp = p + ".parameters." + k;
      if (k == "model" || k == "messages" || k == "input" || k == "prompt" || k == "system" || k == "stream")
        fail(kv.second, kp, "not a parameter a template sets (model has its own field; messages are the template's)");
      if (!kv.second.IsScalar()) fail(kv.second, kp, "expected a number, a boolean or a string");
      t.parameters.emplace_back(k, jsonScalar(kv.second));
    }
  }

  // Variables: a list of names (strings, required), or a mapping of name to {type,
  // required, default, enum}.
  if (auto vs = f["variables"]) {
    const std::string vp = p + ".variables";
    if (vs.IsSequence()) {
      for (std::size_t i = 0; i < vs.size(); ++i) {
        PromptVariable v;
        v.name = nonEmpty(vs[i], vp + "[" + std::to_string(i) + "]");
        t.variables.push_back(std::move(v));
      }
    } else if (vs.IsMap()) {
      for (const auto& kv : vs) {
        PromptVariable v;
        v.name = kv.first.as<std::string>();
        const std::string np = vp + "." + v.name;
        const YAML::Node d = kv.second;
        if (!d.IsMap()) fail(d, np, "expected {type, required, default, enum}");
        Fields vf(*this, d, np, kVariable);
        if (auto ty = vf["type"]) {
          const std::string s = str(ty, np + ".type");
          if (s == "string") v.type = PromptVariable::Type::String;
          else if (s == "number") v.type = PromptVariable::Type::Number;
          else if (s == "integer") v.type = PromptVariable::Type::Integer;
          else if (s == "boolean") v.type = PromptVariable::Type::Boolean;
          else fail(ty, np + ".type", "expected string, number, integer or boolean");
        }
        if (auto e = vf["enum"]) {
          if (v.type != PromptVariable::Type::String) fail(e, np + ".enum", "only for type string");
          if (!e.IsSequence() || e.size() == 0) fail(e, np + ".enum", "expected a non-empty list of values");
          for (std::size_t i = 0; i < e.size(); ++i) v.enum_values.push_back(str(e[i], np + ".enum[" + std::to_string(i) + "]"));
        }
        vf.read("required", v.required);
        if (auto df = vf["default"]) {
          if (!df.IsScalar()) fail(df, np + ".default", std::string("expected ") + typeName(v.type));
          const std::string json = v.type == PromptVariable::Type::String ? boost::json::serialize(boost::json::value(df.Scalar()))
                                                                          : jsonScalar(df);
          boost::system::error_code ec;
          const boost::json::value j = readJson(json, ec);
          const bool ok = !ec && (v.type == PromptVariable::Type::String    ? j.is_string()
                                  : v.type == PromptVariable::Type::Integer ? j.is_int64() || j.is_uint64()
                                  : v.type == PromptVariable::Type::Number  ? j.is_number()
                                                                            : j.is_bool());
          if (!ok) fail(df, np + ".default", std::string("expected ") + typeName(v.type));
          if (!v.enum_values.empty() && std::find(v.enum_values.begin(), v.enum_values.end(), df.Scalar()) == v.enum_values.end())
            fail(df, np + ".default", "not one of the enum's values");
          v.default_json = json;
          v.required = false;
        }
        t.variables.push_back(std::move(v));
      }
    } else {
      fail(vs, vp, "expected a list of names or a mapping of name to {type, required, default, enum}");
    }
    if (t.variables.size() > kMaxVariables) fail(vs, vp, "at most " + std::to_string(kMaxVariables) + " variables");
    for (std::size_t i = 0; i < t.variables.size(); ++i) {
      if (!variableName(t.variables[i].name)) fail(vs, vp, "\"" + t.variables[i].name + "\" is not a variable name (a letter or _, then letters, digits, _ - .)");
      for (std::size_t j = 0; j < i; ++j)
        if (t.variables[j].name == t.variables[i].name) fail(vs, vp, "variable \"" + t.variables[i].name + "\" is declared twice");
    }
  }

  // The messages (or the older single `template` text: one user message).
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> texts;  // role, (text, path)
  if (y["template"] && y["messages"]) fail(y, p, "one of `messages` or `template` (the older single-text form)");
  if (std::string tx; f.read("template", tx)) {
    texts.push_back({"user", {tx, f.at("template")}});
  } else if (auto ms = f["messages"]) {
    const std::string mp = p + ".messages";
    if (!ms.IsSequence() || ms.size() == 0) fail(ms, mp, "expected a non-empty list of {role, content}");
    if (ms.size() > kMaxMessages) fail(ms, mp, "at most " + std::to_string(kMaxMessages) + " messages");
    for (std::size_t i = 0; i < ms.size(); ++i) {
      const std::string ip = mp + "[" + std::to_string(i) + "]";
      Fields mf(*this, ms[i], ip, kMessage);
      if (!mf["role"] || !mf["content"]) fail(ms[i], ip, "expected {role, content}");
      const std::string role = str(ms[i]["role"], ip + ".role");
      if (role != "system" && role != "developer" && role != "user" && role != "assistant")
        fail(ms[i]["role"], ip + ".role", "expected system, developer, user or assistant");
      texts.push_back({role, {str(ms[i]["content"], ip + ".content"), ip + ".content"}});
    }
  } else {
    fail(y, p + ".messages", "required: the template's messages ({role, content}, with {{variable}} placeholders)");
  }
  for (const auto& [role, text_path] : texts) {
    const auto& [text, path] = text_path;
    PromptMessage m;
    m.role = role;
    std::size_t pos = 0;
    for (;;) {
      const std::size_t open = text.find("{{", pos);
      if (open == std::string::npos) break;
      const std::size_t close = text.find("}}", open + 2);
      if (close == std::string::npos) fail(y, path, "a placeholder opened with {{ is not closed with }}");
      std::string var = text.substr(open + 2, close - open - 2);
      var.erase(0, var.find_first_not_of(' '));
      var.erase(var.find_last_not_of(' ') + 1);
      const auto it = std::find_if(t.variables.begin(), t.variables.end(), [&](const PromptVariable& v) { return v.name == var; });
      if (it == t.variables.end()) fail(y, path, "{{" + var + "}} names no declared variable");
      if (open > pos) m.content.push_back(PromptSegment{text.substr(pos, open - pos), -1});
      m.content.push_back(PromptSegment{{}, static_cast<int>(it - t.variables.begin())});
      pos = close + 2;
    }
    if (pos < text.size()) m.content.push_back(PromptSegment{text.substr(pos), -1});
    t.messages.push_back(std::move(m));
  }
  cfg.prompts.push_back(std::move(t));
}

}  // namespace config_detail
}  // namespace tahua
