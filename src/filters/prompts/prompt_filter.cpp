#include "filters/prompts/prompt_filter.h"

#include <boost/json.hpp>

#include <cstring>
#include <string>

#include "core/error.h"
#include "core/json_text.h"
#include "http/request_inspect.h"

namespace tahua {
namespace {

namespace json = boost::json;

constexpr std::size_t kMaxRenderedBytes = 4u << 20;  // a rendered prompt's text, all messages

bool hasPromptKey(const std::string& body) {
  // Cheap first: most requests carry no template. A false hit (the word in a message)
  // only costs the parse below.
  return body.find("\"prompt\"") != std::string::npos;
}

std::string_view kindOf(const json::value& v) {
  switch (v.kind()) {
    case json::kind::string: return "a string";
    case json::kind::int64:
    case json::kind::uint64: return "an integer";
    case json::kind::double_: return "a number";
    case json::kind::bool_: return "a boolean";
    case json::kind::null: return "null";
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "a value";
}

// The variable's value as text, or a problem appended to `problems`.
bool variableText(const PromptVariable& var, const json::value& v, std::string& out, std::string& problems) {
  auto problem = [&](const std::string& what) {
    problems += (problems.empty() ? "" : "; ") + what;
    return false;
  };
  switch (var.type) {
    case PromptVariable::Type::String:
      if (!v.is_string()) return problem("variable '" + var.name + "' must be a string, not " + std::string(kindOf(v)));
      out.assign(v.get_string().data(), v.get_string().size());
      if (!var.enum_values.empty() && std::find(var.enum_values.begin(), var.enum_values.end(), out) == var.enum_values.end()) {
        std::string list;
        for (const auto& e : var.enum_values) list += (list.empty() ? "'" : ", '") + e + "'";
        return problem("variable '" + var.name + "' must be one of " + list);
      }
      return true;
    case PromptVariable::Type::Integer:
      if (v.is_double() && v.get_double() == static_cast<double>(static_cast<std::int64_t>(v.get_double()))) {
        out = std::to_string(static_cast<std::int64_t>(v.get_double()));
        return true;
      }
      if (!v.is_int64() && !v.is_uint64()) return problem("variable '" + var.name + "' must be an integer, not " + std::string(kindOf(v)));
      out = json::serialize(v);
      return true;
    case PromptVariable::Type::Number:
      if (!v.is_number()) return problem("variable '" + var.name + "' must be a number, not " + std::string(kindOf(v)));
      out = jsonText(v);  // 0.5, not 5E-1
      return true;
    case PromptVariable::Type::Boolean:
      if (!v.is_bool()) return problem("variable '" + var.name + "' must be a boolean, not " + std::string(kindOf(v)));
      out = v.get_bool() ? "true" : "false";
      return true;
  }
  return false;
}

json::object message(std::string_view role, std::string content) {
  return json::object{{"role", role}, {"content", std::move(content)}};
}

class PromptFilter final : public Filter {
 public:
  std::string_view name() const override { return "prompt_templates"; }

  FilterStatus onRequestBody(RequestContext& ctx) override {
    if (ctx.endpoint != Endpoint::ChatCompletions && ctx.endpoint != Endpoint::Messages && ctx.endpoint != Endpoint::Responses)
      return FilterStatus::Continue;
    if (!hasPromptKey(ctx.body)) return FilterStatus::Continue;
    try {
      return render(ctx);
    } catch (const std::exception&) {
      ctx.fail(Error{ErrorKind::InvalidRequest, "The prompt template could not be rendered."});
      return FilterStatus::Stop;
    }
  }

 private:
  static FilterStatus invalid(RequestContext& ctx, std::string message) {
    ctx.fail(Error{ErrorKind::InvalidPrompt, std::move(message)});
    return FilterStatus::Stop;
  }

  FilterStatus render(RequestContext& ctx) {
    // The body is checked (depth, shape) by the router's inspection after this filter:
    // here only what rendering needs, with the same depth bound.
    if (jsonDeeperThan(ctx.body, ctx.config->server.max_json_depth)) return FilterStatus::Continue;
    boost::system::error_code ec;
    json::parse_options depth;
    depth.max_depth = ctx.config->server.max_json_depth;  // (Boost.JSON's default, 32, is below the bound)
    json::value doc = json::parse(ctx.body, ec, {}, depth);
    if (ec || !doc.is_object()) return FilterStatus::Continue;  // the router answers invalid_json
    json::object& body = doc.get_object();
    const auto* prompt_field = body.if_contains("prompt");
    if (!prompt_field) return FilterStatus::Continue;
    if (!prompt_field->is_object())
      return invalid(ctx, "'prompt' must be an object: {\"id\": ..., \"version\": ..., \"variables\": {...}}.");
    const json::object& prompt = prompt_field->get_object();
    for (const auto& kv : prompt)
      if (kv.key() != "id" && kv.key() != "version" && kv.key() != "variables")
        return invalid(ctx, "'prompt." + std::string(kv.key()) + "' is not a field of a prompt (id, version, variables).");
    const auto* id = prompt.if_contains("id");
    if (!id || !id->is_string() || id->get_string().empty()) return invalid(ctx, "'prompt.id' must be the template's id (a string).");
    std::string version;
    if (const auto* v = prompt.if_contains("version"); v && !v->is_null()) {
      if (v->is_string()) version.assign(v->get_string().data(), v->get_string().size());
      else if (v->is_int64() || v->is_uint64()) version = json::serialize(*v);
      else return invalid(ctx, "'prompt.version' must be a string.");
    }
    const PromptTemplateConfig* t = ctx.config->findPrompt(std::string_view(id->get_string().data(), id->get_string().size()), version);
    if (!t) {
      ctx.fail(Error{ErrorKind::PromptNotFound, "Prompt '" + std::string(id->get_string()) + "'" +
                                                    (version.empty() || version == "latest" ? std::string() : " version '" + version + "'") +
                                                    " not found."});
      return FilterStatus::Stop;
    }
    ctx.record_fields[static_cast<std::size_t>(RecordField::Prompt)] = t->label;

    // The variables: every problem named at once.
    const json::object empty;
    const json::object* given = &empty;
    if (const auto* v = prompt.if_contains("variables"); v && !v->is_null()) {
      if (!v->is_object()) return invalid(ctx, "'prompt.variables' must be an object of names to values.");
      given = &v->get_object();
    }
    std::string problems;
    for (const auto& kv : *given) {
      const bool declared = std::any_of(t->variables.begin(), t->variables.end(), [&](const PromptVariable& var) { return var.name == kv.key(); });
      if (!declared) problems += (problems.empty() ? "" : "; ") + ("unknown variable '" + std::string(kv.key()) + "'");
    }
    std::vector<std::string> values(t->variables.size());
    for (std::size_t i = 0; i < t->variables.size(); ++i) {
      const PromptVariable& var = t->variables[i];
      const json::value* v = given->if_contains(var.name);
      if (!v || v->is_null()) {
        if (!var.default_json.empty()) {
          const json::value d = json::parse(var.default_json);
          variableText(var, d, values[i], problems);
        } else if (var.required) {
          problems += (problems.empty() ? "" : "; ") + ("missing variable '" + var.name + "'");
        }
        continue;
      }
      variableText(var, *v, values[i], problems);
    }
    if (!problems.empty()) return invalid(ctx, "Prompt " + t->label + ": " + problems + ".");

    // The messages, rendered.
    std::vector<std::pair<std::string_view, std::string>> rendered;
    std::size_t bytes = 0;
    for (const PromptMessage& m : t->messages) {
      std::string text;
      for (const PromptSegment& s : m.content) text += s.variable < 0 ? s.text : values[static_cast<std::size_t>(s.variable)];
      bytes += text.size();
      rendered.emplace_back(m.role, std::move(text));
    }
    if (bytes > kMaxRenderedBytes) return invalid(ctx, "Prompt " + t->label + ": the rendered messages are over 4 MiB.");

    switch (ctx.endpoint) {
      case Endpoint::ChatCompletions: {
        json::array out;
        for (auto& [role, text] : rendered) out.push_back(message(role, std::move(text)));
        if (const auto* m = body.if_contains("messages")) {
          if (!m->is_array()) return invalid(ctx, "'messages' must be an array.");
          for (const auto& x : m->get_array()) out.push_back(x);
        }
        body["messages"] = std::move(out);
        break;
      }
      case Endpoint::Messages: {
        // Anthropic: system text is a field of its own; the rest leads the messages.
        std::string system;
        json::array out;
        for (auto& [role, text] : rendered) {
          if (role == "system" || role == "developer") system += (system.empty() ? "" : "\n\n") + text;
          else out.push_back(message(role, std::move(text)));
        }
        if (const auto* m = body.if_contains("messages")) {
          if (!m->is_array()) return invalid(ctx, "'messages' must be an array.");
          for (const auto& x : m->get_array()) out.push_back(x);
        }
        body["messages"] = std::move(out);
        if (!system.empty()) {
          json::value* existing = body.if_contains("system");
          if (!existing || existing->is_null()) {
            body["system"] = system;
          } else if (existing->is_string()) {
            body["system"] = system + "\n\n" + std::string(existing->get_string());
          } else if (existing->is_array()) {
            json::array blocks{json::object{{"type", "text"}, {"text", system}}};
            for (const auto& b : existing->get_array()) blocks.push_back(b);
            body["system"] = std::move(blocks);
          } else {
            return invalid(ctx, "'system' must be a string or an array of blocks.");
          }
        }
        break;
      }
      default: {  // Responses: the messages lead the input
        json::array out;
        for (auto& [role, text] : rendered) out.push_back(message(role, std::move(text)));
        if (const auto* in = body.if_contains("input")) {
          if (in->is_string()) out.push_back(message("user", std::string(in->get_string())));
          else if (in->is_array())
            for (const auto& x : in->get_array()) out.push_back(x);
          else if (!in->is_null()) return invalid(ctx, "'input' must be a string or an array.");
        }
        body["input"] = std::move(out);
        break;
      }
    }
    body.erase("prompt");
    // The template's defaults, where the request says nothing.
    const auto* model = body.if_contains("model");
    if ((!model || model->is_null() || (model->is_string() && model->get_string().empty())) && !t->model.empty()) body["model"] = t->model;
    for (const auto& [k, v] : t->parameters)
      if (!body.contains(k)) body[k] = json::parse(v);
    ctx.body = json::serialize(doc);
    return FilterStatus::Continue;
  }
};

}  // namespace

std::unique_ptr<Filter> makePromptFilter() { return std::make_unique<PromptFilter>(); }

}  // namespace tahua
