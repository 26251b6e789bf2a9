// The configuration reference is generated from the loader's tables: docs/configuration.md
// must be exactly `tahua --config-reference`, and every table must be whole (a line of
// documentation per field, defaults within their bounds, sections with their tables).
#include "config/field_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "config/config.h"
#include "config/provider_kind.h"
#include "core/duration.h"

namespace tahua {
namespace {

TEST(ConfigReference, DocsConfigurationIsTheGeneratedReference) {
  std::ifstream in("docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md (tests run from the repository root)";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(text.str() == schema::reference())
      << "docs/configuration.md differs from the tables: run `build/tahua --config-reference > docs/configuration.md`";
}

TEST(ConfigReference, EveryFieldIsDocumentedAndItsDefaultIsWithinItsBounds) {
  const auto all = schema::tables();
  ASSERT_GT(all.size(), 10u);
  std::set<std::string_view> paths;
  for (const schema::Table* t : all) {
    EXPECT_TRUE(paths.insert(t->path).second) << "two tables for " << t->path;
    EXPECT_FALSE(t->doc.empty()) << t->path;
    std::set<std::string_view> names;
    for (const schema::Field& f : t->fields) {
      const std::string where = std::string(t->path) + "." + std::string(f.name);
      EXPECT_TRUE(names.insert(f.name).second) << where << " twice";
      EXPECT_GE(f.doc.size(), 8u) << where << ": a field needs a line of documentation";
      if (f.kind == schema::Kind::Section) {
        const std::string sub = t->path.empty() ? std::string(f.name) : where;
        EXPECT_TRUE(schema::findTable(sub)) << where << " is a section without a table";
      }
      if (f.kind == schema::Kind::Choice) EXPECT_NE(f.bound.find(" | "), std::string_view::npos) << where;
      if (f.fallback.empty()) continue;
      if (f.kind == schema::Kind::Integer) {
        const double v = std::stod(std::string(f.fallback));
        EXPECT_TRUE(v >= f.min && v <= f.max) << where << " default " << f.fallback << " outside its bounds";
      }
      if (f.kind == schema::Kind::Duration) {
        const auto d = parseDuration(f.fallback);
        ASSERT_TRUE(d) << where << " default " << f.fallback;
        EXPECT_GE(static_cast<double>(d->count()), f.min) << where;
      }
      if (f.kind == schema::Kind::Boolean) EXPECT_TRUE(f.fallback == "true" || f.fallback == "false") << where;
    }
  }
}

// The names a Choice field lists, split on " | ".
std::vector<std::string> choiceNames(const schema::Field& f) {
  std::vector<std::string> out;
  std::string_view rest = f.bound;
  while (!rest.empty()) {
    const auto bar = rest.find(" | ");
    out.emplace_back(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? std::string_view{} : rest.substr(bar + 3);
  }
  return out;
}

// A provider's `type` lists the vendors of src/providers/vendors.h, and each vendor's own
// fields are its table.
TEST(ConfigReference, ProviderTypesAreTheVendorKinds) {
  const schema::Table* providers = schema::findTable("providers[]");
  ASSERT_TRUE(providers);
  const schema::Field* type = providers->find("type");
  ASSERT_TRUE(type);
  std::vector<std::string> kinds;
  for (const ProviderKind* k : providerKinds()) {
    kinds.emplace_back(k->type);
    if (k->options.empty()) continue;
    const schema::Table* own = schema::findTable("providers[] (type: " + std::string(k->type) + ")");
    ASSERT_TRUE(own) << k->type;
    EXPECT_EQ(own->fields.data(), k->options.data()) << k->type;
  }
  EXPECT_EQ(choiceNames(*type), kinds);
}

TEST(ConfigReference, ResourceKindsAreTheStoredKinds) {
  const schema::Table* resource = schema::findTable("(resource)");
  ASSERT_TRUE(resource);
  ASSERT_TRUE(resource->find("kind"));
  for (const std::string& kind : choiceNames(*resource->find("kind"))) EXPECT_TRUE(storedResourceKind(kind)) << kind;
  EXPECT_FALSE(storedResourceKind("Gadget"));
}

}  // namespace
}  // namespace tahua
