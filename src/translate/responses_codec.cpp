// OpenAI's Responses API as the client's side of a translation (text and function
// tools). With an `openai` provider /v1/responses passes through untouched; for every
// other provider the request becomes a chat request and the answer a `response`
// object or the `response.*` event sequence. Responses and items get ids of tahua's own
// (translate/response_ids.h): the stored-responses filter keeps them and expands
// previous_response_id and item_reference before a request reaches a codec. What is left
// here names a response tahua did not issue (OpenAI's, or kept by no one): a 400 naming
// the parameter. Conversations, built-in tools, background mode and reasoning items
// exist only where /v1/responses is served natively: each is a 400 naming its field,
// never dropped (the answer would silently differ from what was asked).
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <map>

#include "translate/inbound.h"
#include "core/json_read.h"
#include "translate/json_util.h"
#include "translate/response_ids.h"

namespace tahua {
namespace bj = boost::json;
namespace {

using codec::invalid;
using codec::invalidAt;

// The refusal of a feature only a native /v1/responses has.
Error nativeOnly(std::string param, std::string_view what) {
  std::string message = "Parameter '" + param + "': " + std::string(what) +
                        " is not supported by this model (its provider does not serve the Responses API itself; the "
                        "request is translated to chat completions).";
  return invalidAt(std::move(param), std::move(message));
}

using codec::nowSeconds;

// Input content parts -> chat content (a string when it is all text).
std::variant<bj::value, Error> chatContent(const bj::value& content, const std::string& where) {
  if (content.is_string()) return bj::value(content.get_string());
  if (!content.is_array()) return invalid(where + ".content must be a string or an array.");
  bj::array parts;
  bool only_text = true;
  for (std::size_t i = 0; i < content.get_array().size(); ++i) {
    const bj::object* p = content.get_array()[i].if_object();
    if (!p) return invalid(where + ".content[" + std::to_string(i) + "] must be an object.");
    std::string_view type = json::strOr(*p, "type");
    if (type == "input_text" || type == "output_text" || type == "text") {
      parts.push_back(bj::object{{"type", "text"}, {"text", json::strOr(*p, "text")}});
    } else if (type == "input_image") {
      auto url = json::str(*p, "image_url");
      if (!url) return invalid(where + ".content[" + std::to_string(i) + "].image_url is required (file_id images are not supported).");
      parts.push_back(bj::object{{"type", "image_url"}, {"image_url", bj::object{{"url", *url}}}});
      only_text = false;
    } else {
      return invalid(where + ".content[" + std::to_string(i) + "].type '" + std::string(type) + "' is not supported.");
    }
  }
  // One text part is a plain string; several stay separate parts (never glued together).
  if (only_text && parts.size() == 1) return bj::value(parts[0].as_object()["text"]);
  return bj::value(std::move(parts));
}

std::variant<bj::object, Error> responsesToChat(const bj::object& req) {
  if (auto prev = json::str(req, "previous_response_id"))
    return invalidAt("previous_response_id", "Parameter 'previous_response_id': response '" + std::string(*prev) +
                   "' was not stored by this gateway (only a provider that serves the Responses API itself resolves its own response ids).");
  for (std::string_view stateful : {"conversation", "prompt"})
    if (const auto* v = req.if_contains(stateful); v && !v->is_null())
      return nativeOnly(std::string(stateful), stateful == "prompt" ? "a stored prompt" : "a conversation");
  if (json::truthy(req, "background")) return nativeOnly("background", "background mode");
  if (auto n = json::integer(req, "top_logprobs"); n && *n > 0) return nativeOnly("top_logprobs", "log probabilities");
  bj::object chat;
  bj::array messages;
  if (auto instr = json::str(req, "instructions"); instr && !instr->empty())
    messages.push_back(bj::object{{"role", "system"}, {"content", *instr}});
  const bj::value* input = req.if_contains("input");
  if (!input) return invalid("Parameter 'input' is required.");
  if (input->is_string()) {
    messages.push_back(bj::object{{"role", "user"}, {"content", input->get_string()}});
  } else if (input->is_array()) {
    const bj::array& items = input->get_array();
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string where = "input[" + std::to_string(i) + "]";
      const bj::object* item = items[i].if_object();
      if (!item) return invalid(where + " must be an object.");
      std::string_view type = json::strOr(*item, "type", "message");
      if (type == "message") {
        std::string_view role = json::strOr(*item, "role");
        if (role != "user" && role != "assistant" && role != "system" && role != "developer")
          return invalid(where + ".role '" + std::string(role) + "' is not supported.");
        const bj::value* content = item->if_contains("content");
        if (!content) return invalid(where + ".content is required.");
        auto c = chatContent(*content, where);
        if (auto* e = std::get_if<Error>(&c)) return std::move(*e);
        messages.push_back(bj::object{{"role", role}, {"content", std::move(std::get<bj::value>(c))}});
      } else if (type == "function_call") {
        bj::object call{{"id", json::strOr(*item, "call_id")},
                        {"type", "function"},
                        {"function", bj::object{{"name", json::strOr(*item, "name")},
                                                {"arguments", json::strOr(*item, "arguments", "{}")}}}};
        // Consecutive calls belong to one assistant turn.
        if (!messages.empty()) {
          bj::object& last = messages.back().as_object();
          if (json::strOr(last, "role") == "assistant" && last.contains("tool_calls")) {
            last["tool_calls"].as_array().push_back(std::move(call));
            continue;
          }
        }
        messages.push_back(bj::object{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", bj::array{std::move(call)}}});
      } else if (type == "function_call_output") {
        const bj::value* output = item->if_contains("output");
        std::string text = output && output->is_string() ? std::string(output->get_string())
                                                         : (output ? bj::serialize(*output) : std::string());
        messages.push_back(bj::object{{"role", "tool"}, {"tool_call_id", json::strOr(*item, "call_id")}, {"content", text}});
      } else if (type == "reasoning") {
        return nativeOnly(where, "a reasoning item (another model's reasoning, which cannot be carried over)");
      } else if (type == "item_reference") {
        return invalidAt(where, where + ": item '" + std::string(json::strOr(*item, "id")) +
                       "' was not stored by this gateway (only a provider that serves the Responses API itself resolves its own item ids).");
      } else {
        return invalid(where + ".type '" + std::string(type) + "' is not supported.");
      }
    }
  } else {
    return invalid("Parameter 'input' must be a string or an array.");
  }
  chat["messages"] = std::move(messages);
  if (auto model = json::str(req, "model")) chat["model"] = *model;
  if (auto mt = json::integer(req, "max_output_tokens")) chat["max_tokens"] = *mt;
  for (std::string_view key : {"temperature", "top_p"})
    if (const auto* v = req.if_contains(key); v && v->is_number()) chat[key] = v->to_number<double>();
  if (json::truthy(req, "stream")) chat["stream"] = true;
  if (const auto* v = req.if_contains("parallel_tool_calls"); v && v->is_bool()) chat["parallel_tool_calls"] = v->get_bool();
  if (auto user = json::str(req, "user")) chat["user"] = *user;
  if (const auto* tools = json::arr(req, "tools"); tools && !tools->empty()) {
    bj::array ctools;
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const bj::object* t = (*tools)[i].if_object();
      if (!t) return invalidAt("tools[" + std::to_string(i) + "]", "tools[" + std::to_string(i) + "] must be an object.");
      if (const std::string_view tt = json::strOr(*t, "type"); tt != "function")
        return nativeOnly("tools[" + std::to_string(i) + "].type",
                          "the tool type '" + std::string(tt) + "' (only function tools are translated)");
      bj::object fn{{"name", json::strOr(*t, "name")}};
      if (auto d = json::str(*t, "description")) fn["description"] = *d;
      if (const auto* params = json::obj(*t, "parameters")) fn["parameters"] = *params;
      if (const auto* strict = t->if_contains("strict"); strict && strict->is_bool()) fn["strict"] = strict->get_bool();
      ctools.push_back(bj::object{{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(ctools);
  }
  if (const auto* tc = req.if_contains("tool_choice")) {
    if (tc->is_string()) chat["tool_choice"] = tc->get_string();
    else if (const auto* o = tc->if_object(); o && json::strOr(*o, "type") == "function")
      chat["tool_choice"] = bj::object{{"type", "function"}, {"function", bj::object{{"name", json::strOr(*o, "name")}}}};
    else if (!tc->is_null())
      return nativeOnly("tool_choice", "a tool_choice of type '" + std::string(o ? json::strOr(*o, "type") : "") + "'");
  }
  if (const auto* text = json::obj(req, "text"))
    if (const auto* format = json::obj(*text, "format")) {
      std::string_view ft = json::strOr(*format, "type");
      if (ft == "json_object") {
        chat["response_format"] = bj::object{{"type", "json_object"}};
      } else if (ft == "json_schema") {
        // Responses flattens what chat nests under json_schema; a vendor codec that has
        // no structured output refuses it by name.
        bj::object js{{"name", json::strOr(*format, "name", "response")}};
        if (const auto* schema = json::obj(*format, "schema")) js["schema"] = *schema;
        else return invalidAt("text.format.schema", "Parameter 'text.format.schema' is required for type 'json_schema'.");
        if (auto d = json::str(*format, "description")) js["description"] = *d;
        if (const auto* strict = format->if_contains("strict"); strict && strict->is_bool()) js["strict"] = strict->get_bool();
        chat["response_format"] = bj::object{{"type", "json_schema"}, {"json_schema", std::move(js)}};
      } else if (ft != "text" && !ft.empty()) {
        return invalidAt("text.format.type", "Parameter 'text.format' of type '" + std::string(ft) + "' is not supported by this model.");
      }
    }
  return chat;
}

bj::object responsesUsage(const Usage& u) {
  const std::int64_t in = std::max<std::int64_t>(u.prompt_tokens, 0), out = std::max<std::int64_t>(u.completion_tokens, 0);
  return bj::object{{"input_tokens", in},
                    {"input_tokens_details", bj::object{{"cached_tokens", std::max<std::int64_t>(u.cached_tokens, 0)}}},
                    {"output_tokens", out},
                    {"output_tokens_details", bj::object{{"reasoning_tokens", 0}}},
                    {"total_tokens", in + out}};
}

bj::object messageItem(const std::string& id, const std::string& text, bool done) {
  bj::array content;
  if (done) content.push_back(bj::object{{"type", "output_text"}, {"text", text}, {"annotations", bj::array{}}});
  return bj::object{{"type", "message"}, {"id", id}, {"status", done ? "completed" : "in_progress"},
                    {"role", "assistant"}, {"content", std::move(content)}};
}

bj::object callItem(const std::string& id, const ToolCall& call, bool done) {
  return bj::object{{"type", "function_call"}, {"id", id}, {"call_id", call.id}, {"name", call.name},
                    {"arguments", done ? call.arguments : std::string()}, {"status", done ? "completed" : "in_progress"}};
}

bj::object responseObject(const std::string& id, std::int64_t created, const InboundOptions& options, std::string_view status,
                          bj::array output, const Usage* usage, bool incomplete) {
  const std::string& model = options.model;
  bj::object o{{"id", id},
               {"object", "response"},
               {"created_at", created},
               {"status", status},
               {"error", nullptr},
               {"incomplete_details", incomplete ? bj::value(bj::object{{"reason", "max_output_tokens"}}) : bj::value(nullptr)},
               {"model", model},
               {"output", std::move(output)},
               {"parallel_tool_calls", true},
               {"previous_response_id", nullptr},
               {"store", true},
               {"tool_choice", "auto"},
               {"tools", bj::array{}}};
  for (const auto& [k, v] : options.echo) o[k] = v;
  if (usage) o["usage"] = responsesUsage(*usage);
  else o["usage"] = nullptr;
  return o;
}

class ResponsesStreamEncoder final : public ChatStreamEncoder {
 public:
  explicit ResponsesStreamEncoder(InboundOptions options)
      : options_(std::move(options)), id_(newResponseId()), key_(responseKeyOf(id_)), created_(nowSeconds()) {}

  void onChunk(const ChatChunk& chunk, std::string& out) override {
    if (chunk.usage) usage_ = *chunk.usage;
    if (!started_) start(out);
    if (!chunk.content.empty()) {
      if (text_index_ < 0) {
        closeCall(out);
        text_index_ = next_output_++;
        text_item_ = itemIdFor("msg", key_, true, static_cast<std::size_t>(text_index_));
        emit("response.output_item.added", {{"output_index", text_index_}, {"item", messageItem(text_item_, {}, false)}}, out);
        emit("response.content_part.added",
             {{"item_id", text_item_}, {"output_index", text_index_}, {"content_index", 0},
              {"part", bj::object{{"type", "output_text"}, {"text", ""}, {"annotations", bj::array{}}}}},
             out);
      }
      text_ += chunk.content;
      emit("response.output_text.delta",
           {{"item_id", text_item_}, {"output_index", text_index_}, {"content_index", 0}, {"delta", chunk.content}}, out);
    }
    for (const auto& d : chunk.tool_calls) {
      auto it = calls_.find(d.index);
      if (it == calls_.end()) {
        closeText(out);
        closeCall(out);
        Call c;
        c.output_index = next_output_++;
        c.item_id = itemIdFor("fc", key_, true, static_cast<std::size_t>(c.output_index));
        c.call.id = d.id.empty() ? randomId("call_") : d.id;
        c.call.name = d.name;
        it = calls_.emplace(d.index, std::move(c)).first;
        open_call_ = d.index;
        emit("response.output_item.added", {{"output_index", it->second.output_index}, {"item", callItem(it->second.item_id, it->second.call, false)}}, out);
      }
      if (!d.arguments.empty()) {
        it->second.call.arguments += d.arguments;
        emit("response.function_call_arguments.delta",
             {{"item_id", it->second.item_id}, {"output_index", it->second.output_index}, {"delta", d.arguments}}, out);
      }
    }
    if (!chunk.finish_reason.empty()) finish_reason_ = chunk.finish_reason;
  }

  void finish(std::string& out) override {
    if (!started_) start(out);
    closeText(out);
    closeCall(out);
    bj::array output;
    // Items in output_index order.
    std::map<int, bj::object> items;
    if (text_index_ >= 0) items.emplace(text_index_, messageItem(text_item_, text_, true));
    for (auto& [i, c] : calls_) items.emplace(c.output_index, callItem(c.item_id, c.call, true));
    for (auto& [i, item] : items) output.push_back(std::move(item));
    const bool incomplete = finish_reason_ == "length";
    emit(incomplete ? "response.incomplete" : "response.completed",
         {{"response", responseObject(id_, created_, options_, incomplete ? "incomplete" : "completed", std::move(output),
                                      &usage_, incomplete)}},
         out);
  }

  void fail(const Error& error, std::string& out) override {
    emit("error", {{"code", error.code()}, {"message", error.message}, {"param", nullptr}}, out);
  }

 private:
  struct Call {
    int output_index = 0;
    std::string item_id;
    ToolCall call;
    bool closed = false;
  };

  void emit(std::string_view type, bj::object data, std::string& out) {
    data["type"] = type;
    data["sequence_number"] = sequence_++;
    out.append("event: ").append(type).append("\ndata: ").append(bj::serialize(data)).append("\n\n");
  }

  void start(std::string& out) {
    started_ = true;
    emit("response.created", {{"response", responseObject(id_, created_, options_, "in_progress", {}, nullptr, false)}}, out);
    emit("response.in_progress", {{"response", responseObject(id_, created_, options_, "in_progress", {}, nullptr, false)}}, out);
  }

  void closeText(std::string& out) {
    if (text_index_ < 0 || text_closed_) return;
    text_closed_ = true;
    emit("response.output_text.done",
         {{"item_id", text_item_}, {"output_index", text_index_}, {"content_index", 0}, {"text", text_}}, out);
    emit("response.content_part.done",
         {{"item_id", text_item_}, {"output_index", text_index_}, {"content_index", 0},
          {"part", bj::object{{"type", "output_text"}, {"text", text_}, {"annotations", bj::array{}}}}},
         out);
    emit("response.output_item.done", {{"output_index", text_index_}, {"item", messageItem(text_item_, text_, true)}}, out);
  }

  void closeCall(std::string& out) {
    if (open_call_ < 0) return;
    Call& c = calls_[open_call_];
    open_call_ = -1;
    if (c.closed) return;
    c.closed = true;
    emit("response.function_call_arguments.done",
         {{"item_id", c.item_id}, {"output_index", c.output_index}, {"arguments", c.call.arguments}}, out);
    emit("response.output_item.done", {{"output_index", c.output_index}, {"item", callItem(c.item_id, c.call, true)}}, out);
  }

  InboundOptions options_;
  std::string id_;
  std::string key_;  // R of id_ (its items' ids derive from it)
  std::int64_t created_;
  std::int64_t sequence_ = 0;
  bool started_ = false;
  int next_output_ = 0;
  int text_index_ = -1;
  bool text_closed_ = false;
  std::string text_item_;
  std::string text_;
  std::map<int, Call> calls_;  // by chat tool call index
  int open_call_ = -1;
  std::string finish_reason_ = "stop";
  Usage usage_;
};

class ResponsesInbound final : public InboundCodec {
 public:
  std::variant<bj::object, Error> toChat(std::string_view body) const override {
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (ec || !v.is_object()) return Error{ErrorKind::InvalidJson, "The request body is not a JSON object."};
    return responsesToChat(v.get_object());
  }

  std::string encodeResult(const ChatResult& r, const InboundOptions& options) const override {
    const std::string id = newResponseId();
    const std::string_view key = responseKeyOf(id);
    bj::array output;
    if (!r.content.empty()) output.push_back(messageItem(itemIdFor("msg", key, true, output.size()), r.content, true));
    for (const auto& c : r.tool_calls) {
      ToolCall call = c;
      if (call.id.empty()) call.id = randomId("call_");
      output.push_back(callItem(itemIdFor("fc", key, true, output.size()), call, true));
    }
    const bool incomplete = r.finish_reason == "length";
    return bj::serialize(responseObject(id, nowSeconds(), options,
                                        incomplete ? "incomplete" : "completed", std::move(output), &r.usage, incomplete));
  }

  std::unique_ptr<ChatStreamEncoder> streamEncoder(const InboundOptions& options) const override {
    return std::make_unique<ResponsesStreamEncoder>(options);
  }

  // What OpenAI's response object repeats of the request (the rest keeps its default).
  bj::object requestEcho(std::string_view body) const override {
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    bj::object echo;
    if (ec || !v.is_object()) return echo;
    for (std::string_view k : {"instructions", "max_output_tokens", "metadata", "parallel_tool_calls", "reasoning", "store",
                               "temperature", "text", "tool_choice", "tools", "top_p", "truncation", "user"})
      if (const bj::value* x = v.get_object().if_contains(k); x && !x->is_null()) echo[k] = *x;
    return echo;
  }

  std::string encodeUpstreamError(const UpstreamErrorInfo& e) const override {
    return openAIChatInbound().encodeUpstreamError(e);  // the same error shape
  }
};

}  // namespace

const InboundCodec& responsesInbound() {
  static const ResponsesInbound codec;
  return codec;
}

}  // namespace tahua
