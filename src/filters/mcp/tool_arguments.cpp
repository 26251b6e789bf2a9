// valijson throws (rather than aborts) only with VALIJSON_USE_EXCEPTIONS set before its
// headers: a schema it cannot take must be an error, never the end of the process.
#define VALIJSON_USE_EXCEPTIONS 1
#include "filters/mcp/tool_arguments.h"

#include <boost/json.hpp>
#include <valijson/adapters/boost_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

namespace tahua {

namespace bj = boost::json;

struct ArgumentSchema {
  bj::value source;  // the adapter's schema document must outlive parsing; kept with it
  valijson::Schema schema;
};

namespace {

// Drops the keywords whose checks run std::regex (see the header), at every level.
void withoutRegexChecks(bj::value& v, int depth) {
  if (depth > 64) return;
  if (v.is_array()) {
    for (auto& e : v.get_array()) withoutRegexChecks(e, depth + 1);
    return;
  }
  if (!v.is_object()) return;
  bj::object& o = v.get_object();
  o.erase("pattern");
  o.erase("format");
  if (o.erase("patternProperties")) o.erase("additionalProperties");
  for (auto& kv : o) withoutRegexChecks(kv.value(), depth + 1);
}

}  // namespace

std::shared_ptr<const ArgumentSchema> compileArgumentSchema(const bj::value& schema, std::string& error) {
  if (!schema.is_object()) {
    error = "inputSchema is not an object";
    return nullptr;
  }
  auto out = std::make_shared<ArgumentSchema>();
  out->source = schema;
  withoutRegexChecks(out->source, 0);
  try {
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    valijson::adapters::BoostJsonAdapter adapter(out->source);
    parser.populateSchema(adapter, out->schema);
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
  return out;
}

std::string checkArguments(const ArgumentSchema& schema, const bj::value& arguments) {
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::BoostJsonAdapter target(arguments);
  try {
    if (validator.validate(schema.schema, target, &results)) return {};
  } catch (const std::exception& e) {
    return std::string("cannot be checked: ") + e.what();
  }
  // The deepest error says most ("age: 5 is less than 18" rather than "object invalid").
  valijson::ValidationResults::Error error, last;
  bool any = false;
  while (results.popError(error)) {
    if (!any || error.context.size() >= last.context.size()) last = error;
    any = true;
  }
  if (!any) return "does not match the tool's inputSchema";
  std::string where;
  for (std::size_t i = 1; i < last.context.size(); ++i) where += last.context[i];  // context[0] is "<root>"
  return (where.empty() ? std::string("arguments") : where) + ": " + last.description;
}

}  // namespace tahua
