#include "filters/guardrails/chat_event_texts.h"

#include <simdjson.h>

#include <optional>

namespace tahua::guardrail_texts {

namespace {

namespace od = simdjson::ondemand;

struct Choice {
  unsigned channel = 0;
  std::optional<std::string_view> content;
  bool finished = false;
};

// One element of `choices`; false for what needs the DOM (tool calls) or an error.
bool readChoice(od::value element, Choice& c) {
  od::object o;
  if (const auto e = element.get_object().get(o); e != simdjson::SUCCESS)
    return e == simdjson::INCORRECT_TYPE;  // not an object: nothing in it (as the DOM's field() finds nothing)
  for (auto field : o) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
    od::value v;
    if (field.value().get(v) != simdjson::SUCCESS) return false;
    if (key == "index") {
      std::int64_t i = 0;
      c.channel = v.get_int64().get(i) == simdjson::SUCCESS ? static_cast<unsigned>(i & 0xffff) * 1024 : 0;
    } else if (key == "finish_reason") {
      bool null = false;
      if (v.is_null().get(null) != simdjson::SUCCESS) return false;
      c.finished = !null;  // (any value but null: as the DOM's reading)
    } else if (key == "delta") {
      c.content.reset();  // a later "delta" replaces an earlier one whole
      od::object d;
      if (v.get_object().get(d) != simdjson::SUCCESS) continue;
      for (auto df : d) {
        std::string_view dk;
        if (df.unescaped_key().get(dk) != simdjson::SUCCESS) return false;
        if (dk == "tool_calls") return false;
        if (dk != "content") continue;
        od::value cv;
        if (df.value().get(cv) != simdjson::SUCCESS) return false;
        std::string_view text;
        if (const auto e = cv.get_string().get(text); e == simdjson::SUCCESS) c.content = text;
        else if (e == simdjson::INCORRECT_TYPE) c.content.reset();  // null, a number...: no text
        else return false;
      }
    }
  }
  return true;
}

}  // namespace

static_assert(kEventPadding >= simdjson::SIMDJSON_PADDING);

bool chatEventTexts(std::string_view event, bool padded, ChatEventTexts& out) {
  thread_local od::parser parser;
  out.pieces.clear();
  out.closes.clear();
  const char* at = event.data();
  if (!padded) {
    out.padded.assign(event);
    out.padded.append(kEventPadding, '\0');
    at = out.padded.data();
  }
  od::document doc;
  if (parser.iterate(at, event.size(), event.size() + kEventPadding).get(doc) != simdjson::SUCCESS) return false;
  od::object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS) return false;
  thread_local std::vector<Choice> choices;  // the last "choices" key's (its memory reused)
  choices.clear();
  bool have_choices = false;
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
    if (key != "choices") continue;
    choices.clear();
    have_choices = false;
    od::value v;
    if (field.value().get(v) != simdjson::SUCCESS) return false;
    od::array a;
    if (v.get_array().get(a) != simdjson::SUCCESS) continue;  // not an array: no texts (as the DOM's reading)
    have_choices = true;
    for (auto element : a) {
      od::value e;
      if (element.get(e) != simdjson::SUCCESS) return false;
      Choice c;
      if (!readChoice(e, c)) return false;
      choices.push_back(c);
    }
  }
  // Something after the object (simdjson 3.0 has no document::at_end()): the DOM parse
  // refuses it too.
  const char* rest = nullptr;
  if (doc.current_location().get(rest) != simdjson::OUT_OF_BOUNDS) return false;
  if (!have_choices) return true;
  for (const Choice& c : choices) {
    if (c.content) out.pieces.push_back({c.channel, *c.content});
    if (c.finished) out.closes.push_back(c.channel);
  }
  return true;
}

}  // namespace tahua::guardrail_texts
