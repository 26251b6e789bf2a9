#include "http/request_inspect.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>

#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

namespace tahua {
namespace {

Error invalid(ErrorKind kind, std::string msg) { return Error{kind, std::move(msg)}; }

std::string_view trimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

bool jsonDeeperThan(std::string_view json, std::size_t max_depth) {
  const char* p = json.data();
  const char* end = p + json.size();
  std::size_t depth = 0;
  while (p < end) {
    const char c = *p++;
    if (c == '"') {
      // To the closing quote: one not preceded by an odd run of backslashes.
      for (;;) {
        const void* q = std::memchr(p, '"', static_cast<std::size_t>(end - p));
        if (!q) return false;  // unterminated: the parser reports it
        const char* quote = static_cast<const char*>(q);
        std::size_t backslashes = 0;
        for (const char* b = quote; b > p && b[-1] == '\\'; --b) ++backslashes;
        p = quote + 1;
        if (backslashes % 2 == 0) break;
      }
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
  }
  return false;
}

std::variant<RequestFacts, Error> inspectRequest(std::string& body, std::size_t max_depth) {
  using namespace simdjson;
  if (body.capacity() < body.size() + SIMDJSON_PADDING) body.reserve(body.size() + SIMDJSON_PADDING);
  // One parser per thread: it keeps its buffers between requests (no churn).
  thread_local ondemand::parser parser;
  const auto bad_json = [] { return invalid(ErrorKind::InvalidJson, "We could not parse the JSON body of your request."); };

  if (jsonDeeperThan(body, max_depth))
    return invalid(ErrorKind::InvalidJson,
                   "The JSON body of your request is nested deeper than " + std::to_string(max_depth) + " levels.");
  RequestFacts facts;
  bool have_model = false;
  ondemand::document doc;
  if (parser.iterate(padded_string_view(body.data(), body.size(), body.capacity())).get(doc)) return bad_json();
  ondemand::object obj;
  {
    ondemand::json_type type;
    if (doc.type().get(type)) return bad_json();
    if (type != ondemand::json_type::object)
      return invalid(ErrorKind::InvalidJson, "The request body must be a JSON object.");
    if (doc.get_object().get(obj)) return bad_json();
  }
  for (auto field_result : obj) {
    ondemand::field field;
    if (std::move(field_result).get(field)) return bad_json();
    std::string_view key;
    if (field.unescaped_key().get(key)) return bad_json();
    ondemand::value value = field.value();
    if (key == "model") {
      std::string_view raw = trimRight(value.raw_json_token());
      std::string_view name;
      if (value.get_string().get(name)) {
        ondemand::json_type t;
        if (value.type().get(t)) return bad_json();
        return invalid(ErrorKind::InvalidRequest, "'model' must be a string.");
      }
      facts.model.assign(name);
      facts.model_offset = static_cast<std::size_t>(raw.data() - body.data());
      facts.model_length = raw.size();
      have_model = true;
    } else if (key == "stream") {
      ondemand::json_type t;
      if (value.type().get(t)) return bad_json();
      if (t == ondemand::json_type::null) continue;
      if (t != ondemand::json_type::boolean || value.get_bool().get(facts.stream))
        return invalid(ErrorKind::InvalidRequest, "'stream' must be a boolean.");
    } else if (key == "stream_options") {
      ondemand::json_type t;
      if (value.type().get(t)) return bad_json();
      if (t != ondemand::json_type::object) continue;  // the upstream judges its shape
      ondemand::object opts;
      if (value.get_object().get(opts)) return bad_json();
      for (auto opt_result : opts) {
        ondemand::field opt;
        if (std::move(opt_result).get(opt)) return bad_json();
        std::string_view opt_key;
        if (opt.unescaped_key().get(opt_key)) return bad_json();
        if (opt_key == "include_usage") {
          bool v = false;
          if (opt.value().get_bool().get(v) == SUCCESS) facts.include_usage = v;
        }
      }
    } else if (key == "max_tokens" || key == "max_completion_tokens" || key == "max_output_tokens") {
      // The completion bound token limits reserve; the upstream judges its validity.
      std::int64_t v = 0;
      if (value.get_int64().get(v) == SUCCESS && v > 0) facts.max_tokens = std::max(facts.max_tokens, v);
    } else if (key == "n") {
      std::int64_t v = 0;
      if (value.get_int64().get(v) == SUCCESS && v > 0) facts.n = v;
    } else if (key == "temperature") {
      double v = 0;
      if (value.get_double().get(v) == SUCCESS && v >= 0) facts.temperature = v;
    }
  }
  // Anything after the object ("{...} junk") leaves the iterator in bounds.
  if (doc.current_location().error() == SUCCESS) return bad_json();
  if (!have_model || facts.model.empty())
    return invalid(ErrorKind::MissingModel, "You must provide a model parameter.");
  return facts;
}

void rewriteModel(std::string& body, const RequestFacts& facts, std::string_view new_model) {
  std::string token = boost::json::serialize(boost::json::string_view(new_model.data(), new_model.size()));
  body.replace(facts.model_offset, facts.model_length, token);
}

}  // namespace tahua
