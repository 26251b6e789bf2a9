// The configuration reference is generated from the loader's tables: docs/configuration.md
// must be exactly `tahua --config-reference`, and every table must be whole (a line of
// documentation per field, defaults within their bounds, sections with their tables).
#include "config/field_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

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

}  // namespace
}  // namespace tahua
