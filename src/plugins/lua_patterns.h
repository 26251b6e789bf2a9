// Lua's pattern functions for the plugin sandbox, in linear time. Lua's own matcher
// backtracks: `string.find(s, ("a?"):rep(30) .. ("a"):rep(30))` runs for minutes inside
// one C call, where the instruction-count hook that bounds plugin CPU never fires. Here
// string.find, string.match, string.gmatch and string.gsub keep Lua's pattern syntax and
// results but translate each pattern into an RE2 expression (RE2 runs in time linear in
// the subject, and its leftmost-first matching finds what a backtracking matcher would).
//
// What RE2 cannot express is refused with an error naming it: `%b()` (balanced pairs),
// `%f[set]` (frontiers) and back-references (`%1`). Patterns are at most
// kMaxPatternBytes. Compiled expressions are cached per state in Lua userdata, whose
// size charges an estimate of RE2's memory to the plugin's memory budget.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

struct lua_State;

namespace tahua {

constexpr std::size_t kMaxPatternBytes = 1024;

// A Lua pattern as RE2 syntax. `anchor` honours a leading '^' (find, match, gsub; in
// gmatch it is an ordinary character, as in Lua); `positions[i]` tells whether capture i
// is a position capture `()`. False and `error` set when the pattern is malformed or uses
// what RE2 cannot express.
struct TranslatedPattern {
  std::string regex;
  bool anchored = false;
  std::vector<bool> positions;
};
bool translateLuaPattern(std::string_view pattern, bool anchor, TranslatedPattern& out, std::string& error);

// Replaces find, match, gmatch and gsub in the `string` table (and so in the string
// metatable's __index) of `L`.
void installLinearPatterns(lua_State* L);

}  // namespace tahua
