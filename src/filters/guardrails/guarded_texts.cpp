#include "filters/guardrails/guarded_texts.h"

#include <boost/json.hpp>

#include "guardrails/rule_set.h"

namespace tahua::guardrail_texts {
namespace json = boost::json;
using namespace guardrails;

namespace {

json::value* field(json::value& v, std::string_view key) {
  auto* o = v.if_object();
  if (!o) return nullptr;
  auto it = o->find(key);
  return it == o->end() ? nullptr : &it->value();
}

void add(std::vector<Text>& out, json::value* v, std::uint8_t target, unsigned channel = 0) {
  if (v && v->is_string()) out.push_back(Text{&v->as_string(), target, channel});
}

// Every string inside a JSON value (a tool_use `input` object).
void allStrings(json::value& v, std::uint8_t target, unsigned channel, std::vector<Text>& out, int depth = 0) {
  if (depth > 64) return;
  if (v.is_string()) out.push_back(Text{&v.as_string(), target, channel});
  else if (auto* a = v.if_array())
    for (auto& e : *a) allStrings(e, target, channel, out, depth + 1);
  else if (auto* o = v.if_object())
    for (auto& kv : *o) allStrings(kv.value(), target, channel, out, depth + 1);
}

// A content value: a string, or a list of parts with `text` (text, input_text,
// output_text, Anthropic's text and tool_result blocks).
void content(json::value* c, std::uint8_t target, std::vector<Text>& out, int depth = 0) {
  if (!c || depth > 8) return;
  if (c->is_string()) {
    add(out, c, target);
    return;
  }
  auto* parts = c->if_array();
  if (!parts) return;
  for (auto& part : *parts) {
    if (part.is_string()) {
      add(out, &part, target);
      continue;
    }
    add(out, field(part, "text"), target);
    const json::value* type = field(part, "type");
    const std::string_view t = type && type->is_string() ? std::string_view(type->as_string()) : "";
    if (t == "tool_use") {
      if (json::value* in = field(part, "input")) allStrings(*in, kToolArguments, 0, out);
    } else if (t == "tool_result") {
      content(field(part, "content"), kInput, out, depth + 1);
    }
  }
}

std::string_view str(json::value* v) { return v && v->is_string() ? std::string_view(v->as_string()) : ""; }

// An MCP server's answer (a JSON-RPC response): a tool's content and structured
// content, a prompt's messages, a resource's contents, each item its own channel.
void mcpResultTexts(json::value& message, std::vector<Text>& out) {
  json::value* result = field(message, "result");
  if (!result || !result->is_object()) return;
  unsigned item = 0;
  for (std::string_view list : {"content", "messages", "contents"}) {
    json::value* items = field(*result, list);
    if (!items || !items->is_array()) continue;
    for (auto& it : items->as_array()) {
      const unsigned ch = item++ * 1024;
      add(out, field(it, "text"), kOutput, ch);                                          // a text item, a resource's contents
      if (json::value* c = field(it, "content")) add(out, field(*c, "text"), kOutput, ch);  // a prompt's message
      if (json::value* r = field(it, "resource")) add(out, field(*r, "text"), kOutput, ch);  // an embedded resource
    }
  }
  if (json::value* structured = field(*result, "structuredContent")) allStrings(*structured, kOutput, item * 1024, out);
}

}  // namespace

void requestTexts(Endpoint endpoint, json::value& body, std::vector<Text>& out) {
  switch (endpoint) {
    case Endpoint::ChatCompletions:
    case Endpoint::Messages: {
      if (endpoint == Endpoint::Messages) content(field(body, "system"), kSystem, out);
      json::value* msgs = field(body, "messages");
      if (!msgs || !msgs->is_array()) return;
      for (auto& m : msgs->as_array()) {
        const std::string_view role = str(field(m, "role"));
        content(field(m, "content"), role == "system" || role == "developer" ? kSystem : kInput, out);
        if (json::value* calls = field(m, "tool_calls"); calls && calls->is_array())
          for (auto& call : calls->as_array())
            if (json::value* fn = field(call, "function")) add(out, field(*fn, "arguments"), kToolArguments);
      }
      return;
    }
    case Endpoint::Responses: {
      add(out, field(body, "instructions"), kSystem);
      json::value* input = field(body, "input");
      if (!input) return;
      if (input->is_string()) {
        add(out, input, kInput);
        return;
      }
      if (!input->is_array()) return;
      for (auto& item : input->as_array()) {
        const std::string_view type = str(field(item, "type"));
        if (type == "function_call") {
          add(out, field(item, "arguments"), kToolArguments);
        } else if (type == "function_call_output") {
          add(out, field(item, "output"), kInput);
        } else {
          const std::string_view role = str(field(item, "role"));
          content(field(item, "content"), role == "system" || role == "developer" ? kSystem : kInput, out);
        }
      }
      return;
    }
    case Endpoint::Mcp: {  // a tools/call's arguments; a prompts/get's
      json::value* params = field(body, "params");
      json::value* args = params ? field(*params, "arguments") : nullptr;
      if (!args) return;
      const std::string_view method = str(field(body, "method"));
      if (method == "tools/call") allStrings(*args, kToolArguments, 0, out);
      else if (method == "prompts/get") allStrings(*args, kInput, 0, out);
      return;
    }
    case Endpoint::Completions:
    case Endpoint::Embeddings: {
      json::value* p = field(body, endpoint == Endpoint::Completions ? "prompt" : "input");
      if (!p) return;
      if (p->is_string()) add(out, p, kInput);
      else if (p->is_array())
        for (auto& e : p->as_array()) add(out, &e, kInput);
      return;
    }
    default: return;
  }
}

std::string lastUserText(Endpoint endpoint, json::value& body) {
  json::value* last = nullptr;
  switch (endpoint) {
    case Endpoint::ChatCompletions:
    case Endpoint::Messages:
    case Endpoint::Responses: {
      json::value* list = field(body, endpoint == Endpoint::Responses ? "input" : "messages");
      if (!list) return {};
      if (list->is_string()) {
        last = list;  // Responses: the input is the user's message
        break;
      }
      if (!list->is_array()) return {};
      for (auto it = list->as_array().rbegin(); it != list->as_array().rend(); ++it)
        if (str(field(*it, "role")) == "user") {
          last = field(*it, "content");
          break;
        }
      break;
    }
    case Endpoint::Completions: last = field(body, "prompt"); break;
    default: return {};
  }
  std::vector<Text> parts;
  content(last, kInput, parts);
  std::string text;
  for (const Text& t : parts) {
    if (!text.empty()) text += '\n';
    text.append(*t.text);
  }
  return text;
}

void answerTexts(Endpoint endpoint, json::value& body, std::vector<Text>& out) {
  switch (endpoint) {
    case Endpoint::Mcp: mcpResultTexts(body, out); return;
    case Endpoint::ChatCompletions:
    case Endpoint::Completions: {
      json::value* choices = field(body, "choices");
      if (!choices || !choices->is_array()) return;
      unsigned i = 0;
      for (auto& c : choices->as_array()) {
        const unsigned ch = i++ * 1024;
        if (endpoint == Endpoint::Completions) {
          add(out, field(c, "text"), kOutput, ch);
          continue;
        }
        json::value* msg = field(c, "message");
        if (!msg) continue;
        add(out, field(*msg, "content"), kOutput, ch);
        if (json::value* calls = field(*msg, "tool_calls"); calls && calls->is_array()) {
          unsigned j = 0;
          for (auto& call : calls->as_array())
            if (json::value* fn = field(call, "function")) add(out, field(*fn, "arguments"), kOutputToolCalls, ch + ++j);
        }
      }
      return;
    }
    case Endpoint::Messages: {
      json::value* blocks = field(body, "content");
      if (!blocks || !blocks->is_array()) return;
      unsigned i = 0;
      for (auto& b : blocks->as_array()) {
        const unsigned ch = i++ * 1024;
        const std::string_view type = str(field(b, "type"));
        if (type == "text") add(out, field(b, "text"), kOutput, ch);
        else if (type == "tool_use")
          if (json::value* in = field(b, "input")) allStrings(*in, kOutputToolCalls, ch, out);
      }
      return;
    }
    case Endpoint::Responses: {
      json::value* output = field(body, "output");
      if (!output || !output->is_array()) return;
      unsigned i = 0;
      for (auto& item : output->as_array()) {
        const unsigned ch = i++ * 1024;
        const std::string_view type = str(field(item, "type"));
        if (type == "function_call") {
          add(out, field(item, "arguments"), kOutputToolCalls, ch);
        } else if (type == "message") {
          if (json::value* parts = field(item, "content"); parts && parts->is_array())
            for (auto& part : parts->as_array()) add(out, field(part, "text"), kOutput, ch);
        }
      }
      return;
    }
    default: return;
  }
}

void blockAnswer(Endpoint endpoint, json::value& body) {
  auto* o = body.if_object();
  if (!o) return;
  switch (endpoint) {
    case Endpoint::ChatCompletions:
    case Endpoint::Completions:
      if (json::value* choices = field(body, "choices"); choices && choices->is_array())
        for (auto& c : choices->as_array()) {
          auto* co = c.if_object();
          if (!co) continue;
          if (endpoint == Endpoint::Completions) {
            (*co)["text"] = "";
          } else if (json::value* msg = field(c, "message"); msg && msg->is_object()) {
            msg->as_object()["content"] = nullptr;
            msg->as_object().erase("tool_calls");
          }
          (*co)["finish_reason"] = "content_filter";
        }
      return;
    case Endpoint::Messages:
      (*o)["content"] = json::array();
      (*o)["stop_reason"] = "refusal";
      return;
    case Endpoint::Mcp:  // whatever the method, its answer becomes an error
      if (!o->contains("result")) return;
      o->erase("result");
      (*o)["error"] = json::object{{"code", -32000}, {"message", "The answer was blocked by a guardrail."}};
      return;
    case Endpoint::Responses:
      (*o)["output"] = json::array();
      (*o)["status"] = "incomplete";
      (*o)["incomplete_details"] = json::object{{"reason", "content_filter"}};
      o->erase("output_text");
      return;
    default: return;
  }
}

void eventTexts(Endpoint endpoint, json::value& event, EventTexts& out) {
  out.pieces.clear();
  out.closes.clear();
  out.full = false;
  switch (endpoint) {
    case Endpoint::Mcp: {  // one event carries a whole JSON-RPC response: it closes what it opens
      mcpResultTexts(event, out.pieces);
      for (const Text& t : out.pieces) out.closes.push_back(t.channel);
      return;
    }
    case Endpoint::ChatCompletions:
    case Endpoint::Completions: {
      json::value* choices = field(event, "choices");
      if (!choices || !choices->is_array()) return;
      for (auto& c : choices->as_array()) {
        const json::value* idx = field(c, "index");
        const unsigned ch = (idx && idx->is_int64() ? static_cast<unsigned>(idx->as_int64() & 0xffff) : 0) * 1024;
        if (endpoint == Endpoint::Completions) {
          add(out.pieces, field(c, "text"), kOutput, ch);
        } else if (json::value* delta = field(c, "delta")) {
          add(out.pieces, field(*delta, "content"), kOutput, ch);
          if (json::value* calls = field(*delta, "tool_calls"); calls && calls->is_array())
            for (auto& call : calls->as_array()) {
              const json::value* ti = field(call, "index");
              const unsigned t = ti && ti->is_int64() ? static_cast<unsigned>(ti->as_int64() & 1023) : 0;
              if (json::value* fn = field(call, "function")) add(out.pieces, field(*fn, "arguments"), kOutputToolCalls, ch + t + 1);
            }
        }
        if (const json::value* fr = field(c, "finish_reason"); fr && !fr->is_null()) out.closes.push_back(ch);
      }
      return;
    }
    case Endpoint::Messages: {
      const std::string_view type = str(field(event, "type"));
      const json::value* idx = field(event, "index");
      const unsigned ch = (idx && idx->is_int64() ? static_cast<unsigned>(idx->as_int64() & 0xffff) : 0) * 1024;
      if (type == "content_block_delta") {
        if (json::value* delta = field(event, "delta")) {
          const std::string_view dt = str(field(*delta, "type"));
          if (dt == "text_delta") add(out.pieces, field(*delta, "text"), kOutput, ch);
          else if (dt == "input_json_delta") add(out.pieces, field(*delta, "partial_json"), kOutputToolCalls, ch);
        }
      } else if (type == "content_block_stop") {
        out.closes.push_back(ch);
      }
      return;
    }
    case Endpoint::Responses: {
      const std::string_view type = str(field(event, "type"));
      const json::value* idx = field(event, "output_index");
      const unsigned ch = (idx && idx->is_int64() ? static_cast<unsigned>(idx->as_int64() & 0xffff) : 0) * 1024;
      if (type == "response.output_text.delta") {
        add(out.pieces, field(event, "delta"), kOutput, ch);
      } else if (type == "response.function_call_arguments.delta") {
        add(out.pieces, field(event, "delta"), kOutputToolCalls, ch);
      } else if (type == "response.output_text.done") {
        out.full = true;
        add(out.pieces, field(event, "text"), kOutput, ch);
      } else if (type == "response.function_call_arguments.done") {
        out.full = true;
        add(out.pieces, field(event, "arguments"), kOutputToolCalls, ch);
      } else if (type == "response.content_part.done") {
        out.full = true;
        if (json::value* part = field(event, "part")) add(out.pieces, field(*part, "text"), kOutput, ch);
      } else if (type == "response.output_item.done") {
        out.full = true;
        out.closes.push_back(ch);
        if (json::value* item = field(event, "item")) {
          if (const std::string_view it = str(field(*item, "type")); it == "function_call") add(out.pieces, field(*item, "arguments"), kOutputToolCalls, ch);
          else if (json::value* parts = field(*item, "content"); parts && parts->is_array())
            for (auto& part : parts->as_array()) add(out.pieces, field(part, "text"), kOutput, ch);
        }
      } else if (type == "response.completed" || type == "response.incomplete" || type == "response.failed") {
        out.full = true;
        if (json::value* resp = field(event, "response")) answerTexts(Endpoint::Responses, *resp, out.pieces);
      }
      return;
    }
    default: return;
  }
}

}  // namespace tahua::guardrail_texts
