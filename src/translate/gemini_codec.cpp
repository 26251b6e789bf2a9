#include "translate/gemini_codec.h"

#include <boost/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <unordered_map>

#include "core/json_read.h"
#include "sse/sse_parser.h"

namespace tahua {
namespace {

namespace json = boost::json;

// ---------------------------------------------------------------------------------
// Small helpers

Error invalidParam(std::string_view param, std::string_view problem) {
  return Error{ErrorKind::InvalidRequest, "'" + std::string(param) + "' " + std::string(problem)};
}

Error badResponse(std::string message) { return Error{ErrorKind::UpstreamBadResponse, std::move(message)}; }

std::string indexed(std::string_view base, std::size_t i) {
  return std::string(base) + "[" + std::to_string(i) + "]";
}

// JSON numbers arrive as int64, uint64 or double depending on how they were written;
// "10" and "10.0" are the same max_tokens to a client.
std::optional<std::int64_t> asInteger(const json::value& v) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64()) {
    if (v.get_uint64() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(v.get_uint64());
  }
  if (v.is_double()) {
    double d = v.get_double();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

std::optional<double> asNumber(const json::value& v) {
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  if (v.is_double() && std::isfinite(v.get_double())) return v.get_double();
  return std::nullopt;
}

const json::value* field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return (v && !v->is_null()) ? v : nullptr;  // an explicit null means "not given"
}

bool isModelNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
         c == '_';
}

// The model name is spliced into the request path: anything beyond Gemini's model-id
// alphabet could add path segments, a query or a different method (":countTokens").
std::variant<std::string, Error> checkedModelName(std::string_view model) {
  if (model.starts_with("models/")) model.remove_prefix(7);  // the API's resource-name form
  bool ok = !model.empty() && model.size() <= 200 && model.front() != '.';
  for (char c : model) ok = ok && isModelNameChar(c);
  if (!ok) return invalidParam("model", "is not a valid Gemini model name (allowed: letters, digits, '.', '-', '_').");
  return std::string(model);
}

// ---------------------------------------------------------------------------------
// Request encoding

std::string lowerAscii(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// Gemini's fileData needs a MIME type and cannot sniff one from a URL; guess from the
// extension, defaulting to JPEG (the parts come from `image_url`).
std::string guessMimeType(std::string_view url) {
  url = url.substr(0, url.find_first_of("?#"));
  auto slash = url.rfind('/');
  std::string_view name = slash == std::string_view::npos ? url : url.substr(slash + 1);
  auto dot = name.rfind('.');
  if (dot == std::string_view::npos) return "image/jpeg";
  std::string ext = lowerAscii(name.substr(dot + 1));
  if (ext == "png") return "image/png";
  if (ext == "gif") return "image/gif";
  if (ext == "webp") return "image/webp";
  if (ext == "heic") return "image/heic";
  if (ext == "heif") return "image/heif";
  if (ext == "pdf") return "application/pdf";
  return "image/jpeg";
}

std::variant<json::object, Error> imagePart(std::string_view url, const std::string& param) {
  if (url.starts_with("data:")) {
    // data:[<mime>][;param...];base64,<payload>; Gemini's inlineData carries base64 only.
    auto comma = url.find(',');
    if (comma == std::string_view::npos) return invalidParam(param, "is not a valid data: URL.");
    std::string header = lowerAscii(url.substr(5, comma - 5));
    if (!header.ends_with(";base64")) return invalidParam(param, "must be a base64 data: URL.");
    std::string mime = header.substr(0, header.find(';'));
    if (mime.empty()) mime = "image/jpeg";
    json::object inline_data{{"mimeType", mime}, {"data", url.substr(comma + 1)}};
    return json::object{{"inlineData", std::move(inline_data)}};
  }
  if (url.empty()) return invalidParam(param, "must not be empty.");
  json::object file_data{{"mimeType", guessMimeType(url)}, {"fileUri", url}};
  return json::object{{"fileData", std::move(file_data)}};
}

// OpenAI `content` (a string, an array of parts, or null) -> Gemini parts, appended.
// Empty texts are dropped: Gemini rejects a part without data.
std::optional<Error> appendContentParts(const json::value* content, const std::string& param, json::array& parts) {
  if (!content) return std::nullopt;
  if (content->is_string()) {
    if (!content->get_string().empty()) parts.push_back(json::object{{"text", content->get_string()}});
    return std::nullopt;
  }
  if (!content->is_array()) return invalidParam(param, "must be a string or an array of content parts.");
  const json::array& items = content->get_array();
  for (std::size_t j = 0; j < items.size(); ++j) {
    const std::string item_param = indexed(param, j);
    if (!items[j].is_object()) return invalidParam(item_param, "must be an object.");
    const json::object& item = items[j].get_object();
    const json::value* type = field(item, "type");
    if (!type || !type->is_string()) return invalidParam(item_param + ".type", "must be a string.");
    const json::string& t = type->get_string();
    if (t == "text") {
      const json::value* text = field(item, "text");
      if (!text || !text->is_string()) return invalidParam(item_param + ".text", "must be a string.");
      if (!text->get_string().empty()) parts.push_back(json::object{{"text", text->get_string()}});
    } else if (t == "refusal") {  // an assistant turn OpenAI recorded as a refusal: plain text to Gemini
      const json::value* text = field(item, "refusal");
      if (!text || !text->is_string()) return invalidParam(item_param + ".refusal", "must be a string.");
      if (!text->get_string().empty()) parts.push_back(json::object{{"text", text->get_string()}});
    } else if (t == "image_url") {
      const json::value* image = field(item, "image_url");
      const json::value* url = nullptr;
      if (image && image->is_string()) url = image;  // a lenient shorthand some clients send
      if (image && image->is_object()) url = field(image->get_object(), "url");
      if (!url || !url->is_string()) return invalidParam(item_param + ".image_url.url", "must be a string.");
      auto part = imagePart(url->get_string(), item_param + ".image_url.url");
      if (auto* e = std::get_if<Error>(&part)) return std::move(*e);
      parts.push_back(std::move(std::get<json::object>(part)));
    } else if (t == "input_audio") {
      const json::value* audio = field(item, "input_audio");
      const json::value* data = audio && audio->is_object() ? field(audio->get_object(), "data") : nullptr;
      const json::value* format = audio && audio->is_object() ? field(audio->get_object(), "format") : nullptr;
      if (!data || !data->is_string()) return invalidParam(item_param + ".input_audio.data", "must be a string.");
      if (!format || !format->is_string())
        return invalidParam(item_param + ".input_audio.format", "must be a string.");
      std::string mime = "audio/" + lowerAscii(format->get_string());
      parts.push_back(json::object{{"inlineData", json::object{{"mimeType", mime}, {"data", data->get_string()}}}});
    } else {
      return invalidParam(item_param + ".type", "'" + std::string(t) + "' is not supported for Gemini.");
    }
  }
  return std::nullopt;
}

// System text: a string or text parts only.
std::optional<Error> appendSystemParts(const json::value* content, const std::string& param, json::array& parts) {
  json::array tmp;
  if (auto e = appendContentParts(content, param, tmp)) return e;
  for (auto& p : tmp) {
    if (!p.get_object().contains("text")) return invalidParam(param, "may only contain text for Gemini.");
    parts.push_back(std::move(p));
  }
  return std::nullopt;
}

// A tool result's text: a string or text parts, joined.
std::variant<std::string, Error> toolOutputText(const json::value* content, const std::string& param) {
  if (!content) return std::string();
  if (content->is_string()) return std::string(content->get_string());
  if (!content->is_array()) return invalidParam(param, "must be a string or an array of text parts.");
  std::string out;
  const json::array& items = content->get_array();
  for (std::size_t j = 0; j < items.size(); ++j) {
    const json::object* item = items[j].if_object();
    const json::value* text = item ? field(*item, "text") : nullptr;
    const json::value* type = item ? field(*item, "type") : nullptr;
    if (!text || !text->is_string() || !type || !type->is_string() || type->get_string() != "text")
      return invalidParam(indexed(param, j), "must be a text part.");
    out.append(text->get_string());
  }
  return out;
}

// Gemini's functionResponse.response must be an object: a JSON object output is kept as
// is (the model reads its fields), anything else is wrapped as {"content": text}.
json::object toolResponseObject(const std::string& text) {
  boost::system::error_code ec;
  json::value v = readJson(text, ec);
  if (!ec && v.is_object()) return std::move(v.get_object());
  return json::object{{"content", text}};
}

class ContentsBuilder {
 public:
  // Gemini wants user/model turns; consecutive messages of one role become one Content
  // (several tool results of one parallel call must share a Content anyway).
  void add(std::string_view role, json::array parts) {
    if (parts.empty()) return;
    if (!contents_.empty()) {
      json::object& last = contents_.back().get_object();
      if (last["role"].get_string() == role) {
        json::array& last_parts = last["parts"].get_array();
        for (auto& p : parts) last_parts.push_back(std::move(p));
        return;
      }
    }
    contents_.push_back(json::object{{"role", role}, {"parts", std::move(parts)}});
  }
  json::array take() { return std::move(contents_); }
  bool empty() const { return contents_.empty(); }

 private:
  json::array contents_;
};

std::optional<Error> encodeMessages(const json::object& chat, json::object& out) {
  const json::value* messages = field(chat, "messages");
  if (!messages || !messages->is_array()) return invalidParam("messages", "must be an array.");
  const json::array& list = messages->get_array();

  json::array system_parts;
  ContentsBuilder contents;
  std::unordered_map<std::string, std::string> tool_names;  // tool call id -> function name

  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string param = indexed("messages", i);
    if (!list[i].is_object()) return invalidParam(param, "must be an object.");
    const json::object& msg = list[i].get_object();
    const json::value* role_v = field(msg, "role");
    if (!role_v || !role_v->is_string()) return invalidParam(param + ".role", "must be a string.");
    const json::string& role = role_v->get_string();
    const json::value* content = field(msg, "content");

    if (role == "system" || role == "developer") {
      if (auto e = appendSystemParts(content, param + ".content", system_parts)) return e;
    } else if (role == "user") {
      json::array parts;
      if (auto e = appendContentParts(content, param + ".content", parts)) return e;
      contents.add("user", std::move(parts));
    } else if (role == "assistant") {
      json::array parts;
      if (auto e = appendContentParts(content, param + ".content", parts)) return e;
      if (const json::value* calls = field(msg, "tool_calls")) {
        if (!calls->is_array()) return invalidParam(param + ".tool_calls", "must be an array.");
        const json::array& call_list = calls->get_array();
        for (std::size_t j = 0; j < call_list.size(); ++j) {
          const std::string call_param = indexed(param + ".tool_calls", j);
          const json::object* call = call_list[j].if_object();
          if (!call) return invalidParam(call_param, "must be an object.");
          const json::value* fn = field(*call, "function");
          if (!fn || !fn->is_object()) return invalidParam(call_param + ".function", "must be an object.");
          const json::value* name = field(fn->get_object(), "name");
          if (!name || !name->is_string() || name->get_string().empty())
            return invalidParam(call_param + ".function.name", "must be a non-empty string.");
          json::object args;
          const json::value* arguments = field(fn->get_object(), "arguments");
          if (arguments && arguments->is_object()) {
            args = arguments->get_object();
          } else if (arguments && arguments->is_string()) {
            std::string_view text = arguments->get_string();
            // OpenAI sends "" for a call without arguments.
            if (text.find_first_not_of(" \t\r\n") != std::string_view::npos) {
              boost::system::error_code ec;
              json::value parsed = readJson(text, ec);
              if (ec || !parsed.is_object())
                return invalidParam(call_param + ".function.arguments", "must be a JSON object text.");
              args = std::move(parsed.get_object());
            }
          } else if (arguments) {
            return invalidParam(call_param + ".function.arguments", "must be a string.");
          }
          if (const json::value* id = field(*call, "id"); id && id->is_string())
            tool_names[std::string(id->get_string())] = std::string(name->get_string());
          parts.push_back(
              json::object{{"functionCall", json::object{{"name", name->get_string()}, {"args", std::move(args)}}}});
        }
      }
      contents.add("model", std::move(parts));
    } else if (role == "tool" || role == "function") {
      // "function" is OpenAI's legacy role: the name is on the message itself.
      std::string name;
      if (role == "tool") {
        const json::value* id = field(msg, "tool_call_id");
        if (!id || !id->is_string()) return invalidParam(param + ".tool_call_id", "must be a string.");
        auto it = tool_names.find(std::string(id->get_string()));
        if (it != tool_names.end()) name = it->second;
      }
      if (name.empty()) {
        const json::value* n = field(msg, "name");
        if (n && n->is_string()) name = std::string(n->get_string());
      }
      if (name.empty())
        return invalidParam(role == "tool" ? param + ".tool_call_id" : param + ".name",
                            "does not match an earlier assistant tool call.");
      auto text = toolOutputText(content, param + ".content");
      if (auto* e = std::get_if<Error>(&text)) return std::move(*e);
      json::array parts;
      parts.push_back(json::object{{"functionResponse", json::object{{"name", name},
                                                                    {"response", toolResponseObject(std::get<std::string>(text))}}}});
      contents.add("user", std::move(parts));
    } else {
      return invalidParam(param + ".role", "'" + std::string(role) + "' is not a known role.");
    }
  }
  if (contents.empty()) return invalidParam("messages", "must contain at least one non-empty user or assistant message.");
  out["contents"] = contents.take();
  if (!system_parts.empty()) out["systemInstruction"] = json::object{{"parts", std::move(system_parts)}};
  return std::nullopt;
}

// Gemini rejects an OBJECT schema whose `properties` is empty; a function without
// parameters is declared without `parameters`.
bool isEmptyObjectSchema(const json::object& schema) {
  const json::value* props = field(schema, "properties");
  return (!props || (props->is_object() && props->get_object().empty())) && !schema.contains("anyOf") &&
         !schema.contains("oneOf") && !schema.contains("allOf");
}

std::optional<Error> encodeTools(const json::object& chat, json::object& out) {
  if (const json::value* tools = field(chat, "tools")) {
    if (!tools->is_array()) return invalidParam("tools", "must be an array.");
    json::array declarations;
    const json::array& list = tools->get_array();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string param = indexed("tools", i);
      const json::object* tool = list[i].if_object();
      if (!tool) return invalidParam(param, "must be an object.");
      const json::value* type = field(*tool, "type");
      if (!type || !type->is_string() || type->get_string() != "function")
        return invalidParam(param + ".type", "must be 'function' for Gemini.");
      const json::value* fn = field(*tool, "function");
      if (!fn || !fn->is_object()) return invalidParam(param + ".function", "must be an object.");
      const json::object& f = fn->get_object();
      const json::value* name = field(f, "name");
      if (!name || !name->is_string() || name->get_string().empty())
        return invalidParam(param + ".function.name", "must be a non-empty string.");
      json::object decl{{"name", name->get_string()}};
      if (const json::value* d = field(f, "description")) {
        if (!d->is_string()) return invalidParam(param + ".function.description", "must be a string.");
        decl["description"] = d->get_string();
      }
      if (const json::value* p = field(f, "parameters")) {
        if (!p->is_object()) return invalidParam(param + ".function.parameters", "must be an object.");
        if (!isEmptyObjectSchema(p->get_object())) decl["parameters"] = p->get_object();
      }
      declarations.push_back(std::move(decl));
    }
    if (!declarations.empty()) out["tools"] = json::array{json::object{{"functionDeclarations", std::move(declarations)}}};
  }

  if (const json::value* choice = field(chat, "tool_choice")) {
    json::object config;
    if (choice->is_string()) {
      const json::string& c = choice->get_string();
      if (c == "auto") config["mode"] = "AUTO";
      else if (c == "none") config["mode"] = "NONE";
      else if (c == "required") config["mode"] = "ANY";
      else return invalidParam("tool_choice", "must be 'auto', 'none', 'required' or a function.");
    } else if (choice->is_object()) {
      const json::value* fn = field(choice->get_object(), "function");
      const json::value* name = fn && fn->is_object() ? field(fn->get_object(), "name") : nullptr;
      if (!name || !name->is_string() || name->get_string().empty())
        return invalidParam("tool_choice.function.name", "must be a non-empty string.");
      config["mode"] = "ANY";
      config["allowedFunctionNames"] = json::array{name->get_string()};
    } else {
      return invalidParam("tool_choice", "must be a string or an object.");
    }
    out["toolConfig"] = json::object{{"functionCallingConfig", std::move(config)}};
  }
  return std::nullopt;
}

std::optional<Error> encodeGenerationConfig(const json::object& chat, json::object& out) {
  json::object config;

  // max_completion_tokens is the newer name and wins when both are sent.
  for (std::string_view key : {"max_tokens", "max_completion_tokens"}) {
    if (const json::value* v = field(chat, key)) {
      auto n = asInteger(*v);
      if (!n || *n <= 0 || *n > std::numeric_limits<std::int32_t>::max())
        return invalidParam(key, "must be a positive integer.");
      config["maxOutputTokens"] = *n;
    }
  }
  struct NumberParam {
    std::string_view from, to;
  };
  for (auto [from, to] : {NumberParam{"temperature", "temperature"}, NumberParam{"top_p", "topP"},
                          NumberParam{"presence_penalty", "presencePenalty"},
                          NumberParam{"frequency_penalty", "frequencyPenalty"}}) {
    if (const json::value* v = field(chat, from)) {
      auto x = asNumber(*v);
      if (!x) return invalidParam(from, "must be a number.");
      config[to] = *v;  // keep the client's spelling (int or double)
    }
  }
  if (const json::value* v = field(chat, "seed")) {
    auto s = asInteger(*v);
    if (!s || *s < std::numeric_limits<std::int32_t>::min() || *s > std::numeric_limits<std::int32_t>::max())
      return invalidParam("seed", "must be a 32-bit integer for Gemini.");
    config["seed"] = *s;
  }
  if (const json::value* v = field(chat, "stop")) {
    json::array stops;
    if (v->is_string()) {
      stops.push_back(v->get_string());
    } else if (v->is_array()) {
      for (const auto& s : v->get_array()) {
        if (!s.is_string()) return invalidParam("stop", "must be a string or an array of strings.");
        stops.push_back(s);
      }
    } else {
      return invalidParam("stop", "must be a string or an array of strings.");
    }
    if (!stops.empty()) config["stopSequences"] = std::move(stops);
  }
  if (const json::value* v = field(chat, "n")) {
    auto n = asInteger(*v);
    // Only one candidate is decoded, so more could not be returned to the client.
    if (!n || *n != 1) return invalidParam("n", "must be 1 for Gemini.");
    config["candidateCount"] = 1;
  }
  if (const json::value* v = field(chat, "response_format")) {
    const json::value* type = v->is_object() ? field(v->get_object(), "type") : nullptr;
    if (!type || !type->is_string()) return invalidParam("response_format.type", "must be a string.");
    const json::string& t = type->get_string();
    if (t == "json_object") {
      config["responseMimeType"] = "application/json";
    } else if (t == "json_schema") {
      const json::value* js = field(v->get_object(), "json_schema");
      const json::value* schema = js && js->is_object() ? field(js->get_object(), "schema") : nullptr;
      if (!schema || !schema->is_object())
        return invalidParam("response_format.json_schema.schema", "must be an object.");
      config["responseMimeType"] = "application/json";
      config["responseSchema"] = *schema;
    } else if (t != "text") {
      return invalidParam("response_format.type", "must be 'text', 'json_object' or 'json_schema'.");
    }
  }
  if (!config.empty()) out["generationConfig"] = std::move(config);
  return std::nullopt;
}

// ---------------------------------------------------------------------------------
// Response decoding (shared by the whole answer and each stream event)

std::optional<std::int64_t> count(const json::object& o, std::string_view key) {
  const json::value* v = field(o, key);
  if (!v) return std::nullopt;
  auto n = asInteger(*v);
  if (!n || *n < 0) return std::nullopt;
  return n;
}

std::optional<Usage> readUsage(const json::object& response) {
  const json::value* um = field(response, "usageMetadata");
  if (!um || !um->is_object()) return std::nullopt;
  const json::object& m = um->get_object();
  auto prompt = count(m, "promptTokenCount");
  auto candidates = count(m, "candidatesTokenCount");
  auto thoughts = count(m, "thoughtsTokenCount");
  auto total = count(m, "totalTokenCount");
  auto cached = count(m, "cachedContentTokenCount");
  Usage u;
  if (prompt) u.prompt_tokens = *prompt;
  // Thinking tokens are billed as output, as OpenAI counts reasoning tokens.
  if (candidates || thoughts) u.completion_tokens = candidates.value_or(0) + thoughts.value_or(0);
  else if (total && prompt && *total >= *prompt) u.completion_tokens = *total - *prompt;
  if (cached) u.cached_tokens = *cached;
  if (!u.present()) return std::nullopt;
  return u;
}

struct DecodedCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct DecodedResponse {
  std::string id;
  std::string model;
  std::string text;
  std::vector<DecodedCall> calls;
  std::string finish_reason;  // Gemini's raw value, "" if none
  bool has_candidate = false;
  bool prompt_blocked = false;
  std::optional<Usage> usage;
};

std::string mapFinishReason(std::string_view reason, bool has_tool_calls) {
  if (reason == "MAX_TOKENS") return "length";
  if (reason == "SAFETY" || reason == "RECITATION" || reason == "BLOCKLIST" || reason == "PROHIBITED_CONTENT" ||
      reason == "SPII" || reason == "IMAGE_SAFETY")
    return "content_filter";
  // STOP, OTHER, MALFORMED_FUNCTION_CALL, values added later: a normal end.
  return has_tool_calls ? "tool_calls" : "stop";
}

std::string stringField(const json::object& o, std::string_view key) {
  const json::value* v = field(o, key);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

Error errorFromBody(const json::object& err, std::string_view prefix) {
  std::string status = stringField(err, "status");
  std::string message = stringField(err, "message");
  if (message.empty()) message = "unknown error";
  std::string text(prefix);
  if (!status.empty()) text += status + ": ";
  text += message;
  return Error{ErrorKind::UpstreamBadResponse, std::move(text)};
}

std::variant<DecodedResponse, Error> readResponse(const json::object& response) {
  DecodedResponse out;
  out.id = stringField(response, "responseId");
  out.model = stringField(response, "modelVersion");
  out.usage = readUsage(response);

  const json::value* candidates = field(response, "candidates");
  if (candidates && !candidates->is_array()) return badResponse("The upstream sent 'candidates' that is not an array.");
  if (!candidates || candidates->get_array().empty()) {
    const json::value* feedback = field(response, "promptFeedback");
    if (feedback && feedback->is_object() && field(feedback->get_object(), "blockReason")) out.prompt_blocked = true;
    return out;
  }
  const json::object* candidate = candidates->get_array().front().if_object();
  if (!candidate) return badResponse("The upstream sent a candidate that is not an object.");
  out.has_candidate = true;
  out.finish_reason = stringField(*candidate, "finishReason");

  const json::value* content = field(*candidate, "content");
  if (!content) return out;  // e.g. a SAFETY stop carries no content
  if (!content->is_object()) return badResponse("The upstream sent candidate content that is not an object.");
  const json::value* parts = field(content->get_object(), "parts");
  if (!parts) return out;
  if (!parts->is_array()) return badResponse("The upstream sent 'parts' that is not an array.");
  for (const json::value& pv : parts->get_array()) {
    const json::object* part = pv.if_object();
    if (!part) return badResponse("The upstream sent a part that is not an object.");
    const json::value* thought = field(*part, "thought");
    if (thought && thought->is_bool() && thought->get_bool()) continue;  // thinking summary, not answer text
    if (const json::value* text = field(*part, "text")) {
      if (!text->is_string()) return badResponse("The upstream sent a text part that is not a string.");
      out.text.append(text->get_string());
    } else if (const json::value* fc = field(*part, "functionCall")) {
      const json::object* call = fc->if_object();
      const json::value* name = call ? field(*call, "name") : nullptr;
      if (!name || !name->is_string() || name->get_string().empty())
        return badResponse("The upstream sent a function call without a name.");
      const json::value* args = field(*call, "args");
      if (args && !args->is_object()) return badResponse("The upstream sent function call args that are not an object.");
      DecodedCall c;
      c.id = stringField(*call, "id");  // set by some API versions; invented otherwise
      if (c.id.empty()) c.id = randomId("call_");
      c.name = std::string(name->get_string());
      c.arguments = args ? json::serialize(*args) : "{}";
      out.calls.push_back(std::move(c));
    }
    // Other parts (inlineData, executableCode, a bare thoughtSignature) have no
    // counterpart in a chat completion and are left out.
  }
  return out;
}

// ---------------------------------------------------------------------------------
// Streaming

class GeminiStreamDecoder final : public ChatStreamDecoder, private SseSink {
 public:
  std::optional<Error> feed(std::string_view bytes, ChunkSink& sink) override {
    if (error_) return error_;
    sink_ = &sink;
    if (!parser_.feed(bytes, *this) && !error_) error_ = streamEventTooLarge(parser_.maxEventBytes());
    sink_ = nullptr;
    return error_;
  }
  void setMaxEventBytes(std::size_t n) override { parser_.setMaxEventBytes(n); }

  std::optional<Error> finish(ChunkSink& sink) override {
    if (error_) return error_;
    // An event whose blank line never came is still whole if its JSON is: flush it.
    // A cut JSON fails to parse and so reads as the truncation it is.
    sink_ = &sink;
    parser_.feed("\n\n", *this);
    sink_ = nullptr;
    if (error_) {
      error_ = Error{ErrorKind::UpstreamTruncated, "The upstream stream ended in the middle of an event."};
      return error_;
    }
    if (!finished_)
      return Error{ErrorKind::UpstreamTruncated, "The upstream stream ended before the answer was complete."};
    return std::nullopt;
  }

 private:
  void onEvent(const SseEvent& event) override {
    if (error_ || !sink_) return;
    std::string_view data = event.data;
    auto first = data.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) return;
    if (data.substr(first) == "[DONE]") return;  // not Gemini's, but harmless to accept

    boost::system::error_code ec;
    json::value v = readJson(data, ec);
    if (ec || !v.is_object()) {
      error_ = badResponse("The upstream sent a stream event that is not a JSON object.");
      return;
    }
    const json::object& o = v.get_object();
    if (const json::value* err = field(o, "error")) {
      Error e = err->is_object() ? errorFromBody(err->get_object(), "The upstream reported an error: ")
                                 : badResponse("The upstream reported an error.");
      e.kind = ErrorKind::UpstreamInterrupted;  // the response had begun
      error_ = std::move(e);
      return;
    }
    auto decoded = readResponse(o);
    if (auto* e = std::get_if<Error>(&decoded)) {
      error_ = std::move(*e);
      return;
    }
    DecodedResponse& r = std::get<DecodedResponse>(decoded);

    ChatChunk chunk;
    if (!started_) {
      chunk.start = true;
      chunk.id = r.id;
      chunk.model = r.model;
    }
    chunk.content = std::move(r.text);
    for (auto& c : r.calls) {
      // Gemini sends each function call whole, so one delta carries all of it.
      chunk.tool_calls.push_back(ToolCallDelta{next_tool_index_++, std::move(c.id), std::move(c.name),
                                               std::move(c.arguments)});
    }
    if (!finished_) {
      if (!r.finish_reason.empty()) {
        chunk.finish_reason = mapFinishReason(r.finish_reason, next_tool_index_ > 0);
        finished_ = true;
      } else if (r.prompt_blocked) {
        chunk.finish_reason = "content_filter";
        finished_ = true;
      }
    }
    chunk.usage = r.usage;
    if (started_ && chunk.content.empty() && chunk.tool_calls.empty() && chunk.finish_reason.empty() && !chunk.usage)
      return;  // nothing the client needs
    started_ = true;
    sink_->onChunk(chunk);
  }

  SseParser parser_;
  ChunkSink* sink_ = nullptr;
  std::optional<Error> error_;
  bool started_ = false;
  bool finished_ = false;
  int next_tool_index_ = 0;
};

// ---------------------------------------------------------------------------------

class GeminiCodec final : public VendorCodec {
 public:
  std::variant<EncodedRequest, Error> encodeRequest(const json::object& chat,
                                                    const EncodeOptions& options) const override {
    auto model = checkedModelName(options.upstream_model);
    if (auto* e = std::get_if<Error>(&model)) return std::move(*e);

    json::object body;
    if (auto e = encodeMessages(chat, body)) return std::move(*e);
    if (auto e = encodeTools(chat, body)) return std::move(*e);
    if (auto e = encodeGenerationConfig(chat, body)) return std::move(*e);

    EncodedRequest req;
    req.path = "/models/" + std::get<std::string>(model) +
               (options.stream ? ":streamGenerateContent?alt=sse" : ":generateContent");
    req.body = json::serialize(body);
    if (options.stream) req.accept = "text/event-stream";
    return req;
  }

  std::variant<ChatResult, Error> decodeResponse(std::string_view body) const override {
    auto parsed = parseJsonObject(body, "a response");
    if (auto* e = std::get_if<Error>(&parsed)) return std::move(*e);
    const json::object& o = std::get<json::object>(parsed);
    if (const json::value* err = field(o, "error"))
      return err->is_object() ? errorFromBody(err->get_object(), "The upstream reported an error: ")
                              : badResponse("The upstream reported an error.");
    auto decoded = readResponse(o);
    if (auto* e = std::get_if<Error>(&decoded)) return std::move(*e);
    DecodedResponse& r = std::get<DecodedResponse>(decoded);

    ChatResult result;
    result.id = std::move(r.id);
    result.model = std::move(r.model);
    if (r.usage) result.usage = *r.usage;
    if (!r.has_candidate) {
      // No candidate at all: either the prompt was blocked, or the answer is unusable.
      if (!r.prompt_blocked) return badResponse("The upstream sent a response without candidates.");
      result.finish_reason = "content_filter";
      return result;
    }
    result.content = std::move(r.text);
    for (auto& c : r.calls) result.tool_calls.push_back(ToolCall{std::move(c.id), std::move(c.name), std::move(c.arguments)});
    result.finish_reason = mapFinishReason(r.finish_reason, !result.tool_calls.empty());
    return result;
  }

  std::unique_ptr<ChatStreamDecoder> streamDecoder() const override { return std::make_unique<GeminiStreamDecoder>(); }

  UpstreamErrorInfo decodeError(int status, std::string_view body) const override {
    UpstreamErrorInfo info;
    info.status = status >= 400 && status <= 599 ? status : 502;
    boost::system::error_code ec;
    json::value v = readJson(body, ec);
    // The JSON-array stream framing (without alt=sse) wraps the error in an array.
    if (!ec && v.is_array() && !v.get_array().empty()) v = v.get_array().front();
    const json::value* err = !ec && v.is_object() ? field(v.get_object(), "error") : nullptr;
    if (err && err->is_object()) {
      const json::object& e = err->get_object();
      info.type = stringField(e, "status");
      info.message = stringField(e, "message");
      if (status < 400 || status > 599) {
        if (auto code = count(e, "code"); code && *code >= 400 && *code <= 599) info.status = static_cast<int>(*code);
      }
    }
    if (info.message.empty()) info.message = "The upstream returned HTTP " + std::to_string(info.status) + ".";
    return info;
  }
};

}  // namespace

std::unique_ptr<VendorCodec> makeGeminiCodec() { return std::make_unique<GeminiCodec>(); }

}  // namespace tahua
