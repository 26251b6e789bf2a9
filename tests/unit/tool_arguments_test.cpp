// Argument checks against Debian's json-schema-test-suite (draft 7): every group whose
// schema an MCP tool could have (an object schema) and whose keywords the gateway checks
// must give the suite's verdict on every instance; where the gateway leaves a keyword to
// the server (pattern, patternProperties, format), it must still accept every instance
// the suite calls valid: the gateway never refuses a call the server would take.
#include "filters/mcp/tool_arguments.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tahua {
namespace tool_arguments_test {  // named, not anonymous: eight test files compile as one unit

namespace bj = boost::json;
const std::filesystem::path kSuite = "/usr/share/json-schema-test-suite/tests/draft7";

bool mentions(const bj::value& v, std::string_view key) {
  if (v.is_array()) {
    for (const auto& e : v.get_array())
      if (mentions(e, key)) return true;
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object())
      if (kv.key() == key || mentions(kv.value(), key)) return true;
  }
  return false;
}

bool remoteRef(const bj::value& v) {
  if (v.is_array()) {
    for (const auto& e : v.get_array())
      if (remoteRef(e)) return true;
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      if (kv.key() == "$ref" && kv.value().is_string() && !kv.value().get_string().starts_with("#")) return true;
      if (remoteRef(kv.value())) return true;
    }
  }
  return false;
}

TEST(ToolArguments, JsonSchemaTestSuiteDraft7) {
  if (!std::filesystem::exists(kSuite)) GTEST_SKIP() << "json-schema-test-suite is not installed (scripts/bootstrap.sh --test installs it)";
  int exact = 0, lenient = 0, skipped = 0;
  for (const auto& file : std::filesystem::directory_iterator(kSuite)) {
    if (file.path().extension() != ".json") continue;  // optional/ is formats and bignums
    std::ifstream in(file.path());
    std::stringstream text;
    text << in.rdbuf();
    const bj::value groups = bj::parse(text.str());
    for (const auto& g : groups.as_array()) {
      const bj::value& schema = g.at("schema");
      const std::string group = file.path().stem().string() + ": " + std::string(g.at("description").as_string());
      std::string error;
      auto compiled = compileArgumentSchema(schema, error);
      if (!schema.is_object() || remoteRef(schema)) {  // a boolean schema, or one that needs the network
        ++skipped;
        continue;
      }
      ASSERT_TRUE(compiled) << group << ": " << error;
      const bool partial = mentions(schema, "pattern") || mentions(schema, "patternProperties") || mentions(schema, "format");
      for (const auto& c : g.at("tests").as_array()) {
        const std::string name = group + " / " + std::string(c.at("description").as_string());
        const bool valid = c.at("valid").as_bool();
        const bool accepted = checkArguments(*compiled, c.at("data")).empty();
        if (partial) {
          if (valid) {
            EXPECT_TRUE(accepted) << name;
          }
          ++lenient;
        } else {
          EXPECT_EQ(accepted, valid) << name;
          ++exact;
        }
      }
    }
  }
  EXPECT_GT(exact, 300);
  std::printf("json-schema-test-suite draft7: %d cases checked exactly, %d leniently, %d groups skipped\n", exact, lenient, skipped);
}

TEST(ToolArguments, SaysWhereAndWhat) {
  std::string error;
  auto s = compileArgumentSchema(bj::parse(R"({"type":"object","properties":{"age":{"type":"integer","minimum":18}},"required":["age"]})"), error);
  ASSERT_TRUE(s) << error;
  EXPECT_EQ(checkArguments(*s, bj::parse(R"({"age":20})")), "");
  const std::string low = checkArguments(*s, bj::parse(R"({"age":5})"));
  EXPECT_NE(low.find("age"), std::string::npos) << low;
  EXPECT_NE(checkArguments(*s, bj::parse(R"({})")), "");
}

TEST(ToolArguments, ALongStringAgainstAPatternDoesNotReachTheRegexEngine) {
  std::string error;
  auto s = compileArgumentSchema(bj::parse(R"({"type":"object","properties":{"q":{"type":"string","pattern":"^(a|b)*$"}}})"), error);
  ASSERT_TRUE(s) << error;
  EXPECT_EQ(checkArguments(*s, bj::value{{"q", std::string(1'000'000, 'a')}}), "");  // std::regex would overflow the stack
}

TEST(ToolArguments, SchemasItCannotTakeAreErrorsNotCrashes) {
  std::string error;
  EXPECT_FALSE(compileArgumentSchema(bj::parse("true"), error));
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_FALSE(compileArgumentSchema(bj::parse(R"({"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}}})"), error));
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_FALSE(compileArgumentSchema(bj::parse(R"({"type":"object","minLength":"three"})"), error));
  EXPECT_FALSE(error.empty());
}

}  // namespace tool_arguments_test
}  // namespace tahua
