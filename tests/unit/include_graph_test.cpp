// The layers of src/ point down: no folder includes, directly or through a chain of
// other folders, a folder that includes it back. Checked twice: between the top
// folders (server, runtime, filters, ...) and between every folder (filters/cache,
// filters/guardrails, ...). A new upward include fails here with its file and line.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace include_graph_test {  // named, not anonymous: eight test files compile as one unit

namespace fs = std::filesystem;

// An include that crosses folders: where it is, and what it names.
struct Include {
  std::string file;  // relative to src/
  int line = 0;
  std::string target;  // as written, relative to src/
};

// A folder pair whose includes may close a cycle, and why.
struct Exception {
  std::string_view from;
  std::string_view to;
  std::string_view why;
};

// The known exceptions. None today: the folders of src/ form no cycle. Add one only
// with its reason, as {"from", "to", "why"}; an entry that no longer closes a cycle
// fails the test, so the list stays true.
constexpr std::array<Exception, 0> kExceptions{};

// Folder of a path relative to src/ ("filters/cache/x.h" -> "filters/cache"), or its
// top folder ("filters").
std::string folderOf(std::string_view path, bool top) {
  const std::size_t slash = top ? path.find('/') : path.rfind('/');
  return slash == std::string_view::npos ? std::string() : std::string(path.substr(0, slash));
}

// from folder -> to folder -> the includes that make the edge, in file order.
using Graph = std::map<std::string, std::map<std::string, std::vector<Include>>>;

// Every `#include "dir/file"` in src/ that names a file of src/ in another folder. Files
// directly in src/ (main.cpp, the program) sit above every layer and are left out.
std::vector<Include> scanIncludes(const fs::path& src) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*"([^"]+)\")");
  std::vector<Include> out;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".cpp" && ext != ".hpp" && ext != ".inc") continue;
    const std::string rel = entry.path().lexically_relative(src).generic_string();
    if (rel.find('/') == std::string::npos) continue;
    std::ifstream in(entry.path());
    std::string text;
    int line = 0;
    while (std::getline(in, text)) {
      ++line;
      std::smatch m;
      if (!std::regex_search(text, m, kInclude)) continue;
      const std::string target = m[1].str();
      if (target.find('/') == std::string::npos || !fs::exists(src / target)) continue;  // same folder, or not ours
      out.push_back({rel, line, target});
    }
  }
  std::sort(out.begin(), out.end(), [](const Include& a, const Include& b) {
    return a.file != b.file ? a.file < b.file : a.line < b.line;
  });
  return out;
}

bool excepted(const std::string& from, const std::string& to, std::span<const Exception> exceptions) {
  return std::any_of(exceptions.begin(), exceptions.end(), [&](const Exception& e) { return e.from == from && e.to == to; });
}

Graph folderGraph(const std::vector<Include>& includes, bool top, std::span<const Exception> exceptions) {
  Graph g;
  for (const Include& inc : includes) {
    const std::string from = folderOf(inc.file, top);
    const std::string to = folderOf(inc.target, top);
    if (from != to && !excepted(from, to, exceptions)) g[from][to].push_back(inc);
  }
  return g;
}

// The strongly connected components of more than one folder (Tarjan): each is a set of
// folders that reach one another, i.e. a cycle.
std::vector<std::set<std::string>> cycles(const Graph& g) {
  std::map<std::string, int> index, low;
  std::vector<std::string> stack;
  std::set<std::string> on_stack;
  std::vector<std::set<std::string>> out;
  int next = 0;
  std::function<void(const std::string&)> visit = [&](const std::string& v) {
    index[v] = low[v] = next++;
    stack.push_back(v);
    on_stack.insert(v);
    if (auto it = g.find(v); it != g.end())
      for (const auto& [w, incs] : it->second) {
        if (!index.count(w)) {
          visit(w);
          low[v] = std::min(low[v], low[w]);
        } else if (on_stack.count(w)) {
          low[v] = std::min(low[v], index[w]);
        }
      }
    if (low[v] != index[v]) return;
    std::set<std::string> component;
    std::string w;
    do {
      w = stack.back();
      stack.pop_back();
      on_stack.erase(w);
      component.insert(w);
    } while (w != v);
    if (component.size() > 1) out.push_back(std::move(component));
  };
  for (const auto& [v, edges] : g)
    if (!index.count(v)) visit(v);
  return out;
}

// What fails the test: each cycle with the includes that make it (every edge between
// its folders lies on a cycle), at most three per edge. The edges with the fewest
// includes come first: a new upward include is most often one of those. Empty when
// the graph has no cycle.
std::string describeCycles(const Graph& g) {
  std::string out;
  for (const auto& component : cycles(g)) {
    out += "These folders include one another:";
    for (const auto& f : component) out += " " + f;
    out += "\n";
    std::vector<std::pair<std::string, const std::vector<Include>*>> edges;
    for (const auto& from : component)
      for (const auto& [to, incs] : g.at(from))
        if (component.count(to)) edges.emplace_back(from + " -> " + to, &incs);
    std::stable_sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) { return a.second->size() < b.second->size(); });
    for (const auto& [edge, incs] : edges) {
      out += "  " + edge + ":\n";
      for (std::size_t i = 0; i < incs->size() && i < 3; ++i)
        out += "    src/" + (*incs)[i].file + ":" + std::to_string((*incs)[i].line) + ": #include \"" + (*incs)[i].target + "\"\n";
      if (incs->size() > 3) out += "    (and " + std::to_string(incs->size() - 3) + " more)\n";
    }
  }
  return out;
}

// src/ of this checkout: next to this file (a hand-run binary), or under the working
// directory (ctest runs from the source directory).
fs::path sourceRoot() {
  for (const fs::path& p : {fs::path(__FILE__).parent_path() / "../../src", fs::path("src")})
    if (fs::exists(p / "server/session.h")) return p;
  return {};
}

TEST(IncludeGraph, FoldersOfSrcFormNoCycle) {
  const fs::path src = sourceRoot();
  ASSERT_FALSE(src.empty()) << "src/ not found (run from the source directory)";
  const std::vector<Include> includes = scanIncludes(src);
  ASSERT_GT(includes.size(), 200u) << "too few includes found under " << src;
  std::set<std::string> needed;  // listed exceptions that some cycle still needs
  for (const bool top : {true, false}) {
    const std::string found = describeCycles(folderGraph(includes, top, kExceptions));
    if (!found.empty())
      ADD_FAILURE() << (top ? "Between top folders of src/:\n" : "Between folders of src/:\n") << found
                    << "Point the include down (a narrow interface in the lower folder, as server/session_host.h is "
                       "for runtime/), or list the exception in tests/unit/include_graph_test.cpp with its reason.";
    const std::string unexcepted = describeCycles(folderGraph(includes, top, {}));
    for (const Exception& e : kExceptions)
      if (unexcepted.find("  " + std::string(e.from) + " -> " + std::string(e.to) + ":\n") != std::string::npos)
        needed.insert(std::string(e.from) + " -> " + std::string(e.to));
  }
  for (const Exception& e : kExceptions)
    EXPECT_TRUE(needed.count(std::string(e.from) + " -> " + std::string(e.to)))
        << "the listed exception " << e.from << " -> " << e.to << " no longer closes a cycle: remove it";
}

// The checker itself, on a made-up tree: a cycle is named by its includes, and a listed
// exception lets it pass.
TEST(IncludeGraph, CycleIsNamedByItsIncludes) {
  const std::vector<Include> includes = {
      {"a/x.h", 3, "b/y.h"},
      {"a/x.h", 4, "b/v.h"},
      {"b/y.cpp", 7, "c/z.h"},
      {"c/z.h", 5, "a/x.h"},
      {"c/z.h", 6, "d/w.h"},
  };
  const std::string found = describeCycles(folderGraph(includes, true, {}));
  EXPECT_NE(found.find("These folders include one another: a b c\n"), std::string::npos) << found;
  EXPECT_NE(found.find("src/a/x.h:3: #include \"b/y.h\""), std::string::npos) << found;
  EXPECT_NE(found.find("src/b/y.cpp:7: #include \"c/z.h\""), std::string::npos) << found;
  EXPECT_NE(found.find("src/c/z.h:5: #include \"a/x.h\""), std::string::npos) << found;
  EXPECT_EQ(found.find("d/w.h"), std::string::npos) << "not on the cycle: " << found;
  EXPECT_GT(found.find("a -> b:"), found.find("c -> a:")) << "the edge of two includes comes last: " << found;

  const std::array<Exception, 1> allowed{{{"c", "a", "test"}}};
  EXPECT_EQ(describeCycles(folderGraph(includes, true, allowed)), "");
}

}  // namespace include_graph_test
