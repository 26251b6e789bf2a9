#include "http/request_inspect.h"

#include <simdjson.h>

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

std::variant<RequestFacts, Error> inspectRequest(std::string& body) {
  using namespace simdjson;
  if (body.capacity() < body.size() + SIMDJSON_PADDING) body.reserve(body.size() + SIMDJSON_PADDING);
  // One parser per thread: it keeps its buffers between requests (no churn).
  thread_local ondemand::parser parser;
  const auto bad_json = [] { return invalid(ErrorKind::InvalidJson, "We could not parse the JSON body of your request."); };

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
