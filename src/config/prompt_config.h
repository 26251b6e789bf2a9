// Prompt templates (`PromptTemplate` resources, `prompts:`): named, versioned message
// lists with typed variables, a default model and default parameters. A request names
// one (`prompt: {id, version, variables}`) and the prompt filter renders it into the
// request before routing (docs/prompt-templates.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tahua {

struct PromptVariable {
  enum class Type : std::uint8_t { String, Number, Integer, Boolean };
  std::string name;
  Type type = Type::String;
  bool required = true;
  std::string default_json;             // a JSON scalar of `type`; "" : none
  std::vector<std::string> enum_values;  // strings only; empty: any
};

// A message's content, cut at its placeholders at load: literal text, or a variable.
struct PromptSegment {
  std::string text;                   // literal (when variable < 0)
  int variable = -1;                  // index into variables
};

struct PromptMessage {
  std::string role;  // system, developer, user, assistant
  std::vector<PromptSegment> content;
};

struct PromptTemplateConfig {
  std::string id;
  std::string version = "1";
  std::string label;  // "id@version", what the records say
  std::string model;  // the default model ("" : the request must name one)
  std::vector<std::pair<std::string, std::string>> parameters;  // top-level field -> JSON, set when the request has none
  std::vector<PromptVariable> variables;
  std::vector<PromptMessage> messages;
  std::string origin;  // the file or resource it came from
};

// Version order: numeric when both are numbers ("10" after "9"), else by text. "Latest"
// is the greatest.
bool promptVersionLess(std::string_view a, std::string_view b);

}  // namespace tahua
