#include "plugins/lua_patterns.h"

#include <re2/re2.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <lua.hpp>

// Lua raises errors with longjmp (Debian's liblua is C): a frame that calls a Lua API
// function that may raise (every luaL_check*, every push that allocates) holds no C++
// object with a destructor. The C++ work (translation, RE2) happens in helpers that
// return before Lua is called again.

namespace tahua {
namespace {

constexpr int kMaxCaptures = 32;  // Lua's LUA_MAXCAPTURES
constexpr int kCacheLimit = 64;   // compiled patterns kept per state and mode
constexpr const char* kPatternMeta = "tahua.pattern";

// The POSIX class of a Lua class letter (%a ...), negated for upper case; null if `c` is
// not a class letter. In the C locale they are Lua's isalpha() etc.
const char* posixClass(unsigned char c, bool& negated) {
  negated = c >= 'A' && c <= 'Z';
  switch (negated ? c - 'A' + 'a' : c) {
    case 'a': return "alpha";
    case 'c': return "cntrl";
    case 'd': return "digit";
    case 'g': return "graph";
    case 'l': return "lower";
    case 'p': return "punct";
    case 's': return "space";
    case 'u': return "upper";
    case 'w': return "alnum";
    case 'x': return "xdigit";
    default: return nullptr;
  }
}

void literal(std::string& out, unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
    out += static_cast<char>(c);
    return;
  }
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

// The contents of a POSIX class inside brackets: "[:alpha:]" or "[:^alpha:]".
void classItem(std::string& out, const char* name, bool negated) {
  out += negated ? "[:^" : "[:";
  out += name;
  out += ":]";
}

}  // namespace

bool translateLuaPattern(std::string_view p, bool anchor, TranslatedPattern& out, std::string& error) {
  out = {};
  if (p.size() > kMaxPatternBytes) {
    error = "pattern too long (plugins allow " + std::to_string(kMaxPatternBytes) + " bytes)";
    return false;
  }
  std::string& r = out.regex;
  std::size_t i = 0;
  if (anchor && !p.empty() && p[0] == '^') {
    out.anchored = true;
    i = 1;
  }
  int open = 0;
  while (i < p.size()) {
    const unsigned char c = static_cast<unsigned char>(p[i]);
    if (c == '(') {
      if (i + 1 < p.size() && p[i + 1] == ')') {  // position capture
        r += "()";
        out.positions.push_back(true);
        i += 2;
      } else {
        r += '(';
        out.positions.push_back(false);
        ++open;
        ++i;
      }
      if (out.positions.size() > static_cast<std::size_t>(kMaxCaptures)) {
        error = "too many captures";
        return false;
      }
      continue;
    }
    if (c == ')') {
      if (open == 0) {
        error = "invalid pattern capture";
        return false;
      }
      --open;
      r += ')';
      ++i;
      continue;
    }
    if (c == '$' && i + 1 == p.size()) {
      r += '$';  // RE2 without multi-line: the end of the subject only, as in Lua
      ++i;
      continue;
    }
    // One single-character class, then perhaps a quantifier.
    std::size_t next = i + 1;
    if (c == '%') {
      if (i + 1 >= p.size()) {
        error = "malformed pattern (ends with '%')";
        return false;
      }
      const unsigned char e = static_cast<unsigned char>(p[i + 1]);
      if (e == 'b' || e == 'f' || (e >= '0' && e <= '9')) {
        error = e == 'b' ? "pattern item %b is not supported in plugins (patterns run in linear time)"
                : e == 'f' ? "pattern item %f is not supported in plugins (patterns run in linear time)"
                           : "back-references (%1-%9) are not supported in plugins (patterns run in linear time)";
        return false;
      }
      bool negated = false;
      if (const char* cls = posixClass(e, negated)) {
        r += '[';
        classItem(r, cls, negated);
        r += ']';
      } else {
        literal(r, e);
      }
      next = i + 2;
    } else if (c == '[') {
      std::size_t j = i + 1;
      bool negated_set = false;
      if (j < p.size() && p[j] == '^') {
        negated_set = true;
        ++j;
      }
      std::string items;
      bool first = true;
      for (;;) {
        if (j >= p.size()) {
          error = "malformed pattern (missing ']')";
          return false;
        }
        const unsigned char sc = static_cast<unsigned char>(p[j]);
        if (sc == ']' && !first) break;
        first = false;
        if (sc == '%') {
          if (j + 1 >= p.size()) {
            error = "malformed pattern (missing ']')";
            return false;
          }
          const unsigned char e = static_cast<unsigned char>(p[j + 1]);
          bool negated = false;
          if (const char* cls = posixClass(e, negated))
            classItem(items, cls, negated);
          else
            literal(items, e);
          j += 2;
        } else if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
          const unsigned char hi = static_cast<unsigned char>(p[j + 2]);
          if (hi >= sc) {  // Lua: a reversed range matches nothing
            literal(items, sc);
            items += '-';
            literal(items, hi);
          }
          j += 3;
        } else {
          literal(items, sc);
          ++j;
        }
      }
      if (items.empty())  // only reversed ranges: nothing, or anything when negated
        r += negated_set ? "[\\x00-\\xff]" : "[^\\x00-\\xff]";
      else
        r += (negated_set ? "[^" : "[") + items + "]";
      next = j + 1;
    } else if (c == '.') {
      r += "[\\x00-\\xff]";
    } else {
      literal(r, c);
    }
    if (next < p.size()) {
      switch (p[next]) {
        case '*': r += '*'; ++next; break;
        case '+': r += '+'; ++next; break;
        case '-': r += "*?"; ++next; break;
        case '?': r += '?'; ++next; break;
        default: break;
      }
    }
    i = next;
  }
  if (open != 0) {
    error = "unfinished capture";
    return false;
  }
  return true;
}

namespace {

// A compiled pattern, the payload of a full userdata (its __gc deletes `re`).
struct Compiled {
  re2::RE2* re;
  std::uint64_t positions;  // bit i: capture i is a position capture
  int captures;
  bool anchored;
};

enum Mode : int { kAnchored = 1, kFree = 2, kPlain = 3 };  // upvalue index of the mode's cache

int collectCompiled(lua_State* L) {
  auto* c = static_cast<Compiled*>(luaL_checkudata(L, 1, kPatternMeta));
  delete c->re;
  c->re = nullptr;
  return 0;
}

// Fills `c` from `pattern`; on failure writes a message into `err`. No Lua calls.
bool compileInto(Compiled& c, std::string_view pattern, Mode mode, char* err, std::size_t err_size) {
  std::string error;
  TranslatedPattern t;
  if (mode == kPlain) {
    if (pattern.size() > kMaxPatternBytes) {
      error = "search text too long (plugins allow " + std::to_string(kMaxPatternBytes) + " bytes)";
    } else {
      t.regex.assign(pattern);
    }
  } else {
    translateLuaPattern(pattern, mode == kAnchored, t, error);
  }
  if (error.empty()) {
    RE2::Options o;
    o.set_encoding(RE2::Options::EncodingLatin1);  // Lua strings are bytes
    o.set_log_errors(false);
    o.set_literal(mode == kPlain);
    o.set_max_mem(64 << 10);
    auto* re = new RE2(t.regex, o);
    if (!re->ok()) {
      error = "pattern too complex for plugins (" + re->error() + ")";
      delete re;
    } else {
      c.re = re;
      c.anchored = t.anchored;
      c.captures = static_cast<int>(t.positions.size());
      c.positions = 0;
      for (std::size_t k = 0; k < t.positions.size(); ++k)
        if (t.positions[k]) c.positions |= std::uint64_t{1} << k;
    }
  }
  if (error.empty()) return true;
  std::snprintf(err, err_size, "%s", error.c_str());
  return false;
}

// Pushes the compiled form of the string at `arg` (cached per mode in the C closure's
// upvalue `mode`) and returns it. Raises a Lua error for a bad pattern.
Compiled* compiled(lua_State* L, int arg, Mode mode) {
  std::size_t len = 0;
  const char* p = luaL_checklstring(L, arg, &len);
  const int cache = lua_upvalueindex(mode);
  lua_pushvalue(L, arg);
  if (lua_rawget(L, cache) == LUA_TUSERDATA) return static_cast<Compiled*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  // The userdata's size stands for RE2's memory, so the plugin's memory budget and
  // Lua's collector both see it.
  auto* c = static_cast<Compiled*>(lua_newuserdatauv(L, sizeof(Compiled) + 2048 + 32 * len, 0));
  c->re = nullptr;
  luaL_setmetatable(L, kPatternMeta);
  char err[256];
  if (!compileInto(*c, std::string_view(p, len), mode, err, sizeof err)) {
    lua_pushstring(L, err);
    lua_error(L);
  }
  lua_rawgeti(L, cache, 1);  // entries so far
  const lua_Integer n = lua_tointeger(L, -1) + 1;
  lua_pop(L, 1);
  if (n > kCacheLimit) {  // start over: the old entries go when nothing uses them
    lua_createtable(L, 1, kCacheLimit);
    lua_replace(L, cache);
    lua_pushinteger(L, 1);
  } else {
    lua_pushinteger(L, n);
  }
  lua_rawseti(L, cache, 1);
  lua_pushvalue(L, arg);
  lua_pushvalue(L, -2);
  lua_rawset(L, cache);
  return c;
}

// Lua 5.4's posrelatI: a 1-based start (negative counts from the end) as a 0-based
// offset, which may be past the end.
std::size_t startOffset(lua_Integer pos, std::size_t len) {
  if (pos > 0) return static_cast<std::size_t>(pos) - 1;
  if (pos == 0 || pos < -static_cast<lua_Integer>(len)) return 0;
  return len + static_cast<std::size_t>(pos);
}

bool hasSpecials(const char* p, std::size_t len) {
  for (std::size_t i = 0; i < len; ++i)
    if (std::strchr("^$*+?.([%-", p[i]) && p[i] != '\0') return true;
  return false;
}

bool search(const Compiled& c, const char* s, std::size_t len, std::size_t from, bool anchored, re2::StringPiece* sub) {
  return c.re->Match(re2::StringPiece(s, len), from, len, anchored ? RE2::ANCHOR_START : RE2::UNANCHORED, sub,
                     c.captures + 1);
}

// Capture i (0-based), or the whole match when the pattern has none and i is 0.
void pushCapture(lua_State* L, const Compiled& c, const char* s, const re2::StringPiece* sub, int i) {
  if (c.captures == 0) {
    lua_pushlstring(L, sub[0].data(), sub[0].size());
  } else if (c.positions >> i & 1) {
    lua_pushinteger(L, static_cast<lua_Integer>(sub[i + 1].data() - s) + 1);
  } else {
    lua_pushlstring(L, sub[i + 1].data(), sub[i + 1].size());
  }
}

int pushCaptures(lua_State* L, const Compiled& c, const char* s, const re2::StringPiece* sub, bool whole_if_none) {
  const int n = c.captures == 0 && whole_if_none ? 1 : c.captures;
  luaL_checkstack(L, n, "too many captures");
  for (int i = 0; i < n; ++i) pushCapture(L, c, s, sub, i);
  return n;
}

int findOrMatch(lua_State* L, bool find) {
  std::size_t len = 0, plen = 0;
  const char* s = luaL_checklstring(L, 1, &len);
  const char* p = luaL_checklstring(L, 2, &plen);
  const std::size_t init = startOffset(luaL_optinteger(L, 3, 1), len);
  if (init > len) {
    luaL_pushfail(L);
    return 1;
  }
  const bool plain = find && (lua_toboolean(L, 4) || !hasSpecials(p, plen));
  const Compiled& c = *compiled(L, 2, plain ? kPlain : kAnchored);
  re2::StringPiece sub[kMaxCaptures + 1];
  if (!search(c, s, len, init, c.anchored, sub)) {
    luaL_pushfail(L);
    return 1;
  }
  if (!find) return pushCaptures(L, c, s, sub, true);
  const auto start = static_cast<lua_Integer>(sub[0].data() - s);
  lua_pushinteger(L, start + 1);
  lua_pushinteger(L, start + static_cast<lua_Integer>(sub[0].size()));
  return 2 + pushCaptures(L, c, s, sub, false);
}

int strFind(lua_State* L) { return findOrMatch(L, true); }
int strMatch(lua_State* L) { return findOrMatch(L, false); }

// gmatch's iterator. Upvalues: 1 subject, 2 compiled pattern, 3 next offset, 4 end of
// the last match (-1: none). An empty match where the last one ended is skipped (5.4).
int gmatchNext(lua_State* L) {
  std::size_t len = 0;
  const char* s = lua_tolstring(L, lua_upvalueindex(1), &len);
  const auto& c = *static_cast<const Compiled*>(lua_touserdata(L, lua_upvalueindex(2)));
  auto from = static_cast<std::size_t>(lua_tointeger(L, lua_upvalueindex(3)));
  const lua_Integer last = lua_tointeger(L, lua_upvalueindex(4));
  re2::StringPiece sub[kMaxCaptures + 1];
  while (from <= len && search(c, s, len, from, false, sub)) {
    const auto start = static_cast<std::size_t>(sub[0].data() - s);
    const std::size_t end = start + sub[0].size();
    if (static_cast<lua_Integer>(end) == last) {  // empty, where the last match ended
      from = start + 1;
      continue;
    }
    lua_pushinteger(L, static_cast<lua_Integer>(end));
    lua_replace(L, lua_upvalueindex(3));
    lua_pushinteger(L, static_cast<lua_Integer>(end));
    lua_replace(L, lua_upvalueindex(4));
    return pushCaptures(L, c, s, sub, true);
  }
  lua_pushinteger(L, static_cast<lua_Integer>(len) + 1);
  lua_replace(L, lua_upvalueindex(3));
  return 0;
}

int strGmatch(lua_State* L) {
  std::size_t len = 0;
  luaL_checklstring(L, 1, &len);
  std::size_t init = startOffset(luaL_optinteger(L, 3, 1), len);
  if (init > len) init = len + 1;
  compiled(L, 2, kFree);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, -2);
  lua_pushinteger(L, static_cast<lua_Integer>(init));
  lua_pushinteger(L, -1);
  lua_pushcclosure(L, gmatchNext, 4);
  return 1;
}

// One replacement of gsub into `b`: the string (with %0-%9 and %%), the table's value
// for the first capture, or the function's result for all captures; false or nil
// keeps the match.
void addReplacement(lua_State* L, luaL_Buffer* b, const Compiled& c, const char* s, const re2::StringPiece* sub, int kind) {
  if (kind == LUA_TSTRING || kind == LUA_TNUMBER) {
    std::size_t rlen = 0;
    const char* r = lua_tolstring(L, 3, &rlen);
    for (std::size_t i = 0; i < rlen; ++i) {
      if (r[i] != '%') {
        luaL_addchar(b, r[i]);
        continue;
      }
      ++i;
      if (i < rlen && r[i] == '%') {
        luaL_addchar(b, '%');
      } else if (i < rlen && r[i] >= '0' && r[i] <= '9') {
        const int k = r[i] - '0';
        if (k == 0) {
          luaL_addlstring(b, sub[0].data(), sub[0].size());
        } else {
          if (k > c.captures && !(k == 1 && c.captures == 0)) luaL_error(L, "invalid capture index %%%d in replacement string", k);
          pushCapture(L, c, s, sub, k - 1);
          luaL_tolstring(L, -1, nullptr);
          lua_remove(L, -2);
          luaL_addvalue(b);
        }
      } else {
        luaL_error(L, "invalid use of '%%' in replacement string");
      }
    }
    return;
  }
  if (kind == LUA_TFUNCTION) {
    lua_pushvalue(L, 3);
    const int n = pushCaptures(L, c, s, sub, true);
    lua_call(L, n, 1);
  } else {  // table
    pushCapture(L, c, s, sub, 0);
    lua_gettable(L, 3);
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    luaL_addlstring(b, sub[0].data(), sub[0].size());
  } else if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  } else {
    luaL_addvalue(b);
  }
}

int strGsub(lua_State* L) {
  std::size_t len = 0;
  const char* s = luaL_checklstring(L, 1, &len);
  const int kind = lua_type(L, 3);
  const lua_Integer max = luaL_optinteger(L, 4, static_cast<lua_Integer>(len) + 1);
  luaL_argexpected(L, kind == LUA_TNUMBER || kind == LUA_TSTRING || kind == LUA_TFUNCTION || kind == LUA_TTABLE, 3,
                   "string/function/table");
  const Compiled& c = *compiled(L, 2, kAnchored);  // stays on the stack: kept alive
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  std::size_t from = 0;
  lua_Integer last = -1, n = 0;
  re2::StringPiece sub[kMaxCaptures + 1];
  while (n < max && from <= len && search(c, s, len, from, c.anchored, sub)) {
    const auto start = static_cast<std::size_t>(sub[0].data() - s);
    const std::size_t end = start + sub[0].size();
    luaL_addlstring(&b, s + from, start - from);
    if (static_cast<lua_Integer>(end) == last) {  // empty, where the last match ended
      if (start >= len) {
        from = len;
        break;
      }
      luaL_addchar(&b, s[start]);
      from = start + 1;
    } else {
      ++n;
      addReplacement(L, &b, c, s, sub, kind);
      from = end;
      last = static_cast<lua_Integer>(end);
    }
    if (c.anchored) break;
  }
  if (from < len) luaL_addlstring(&b, s + from, len - from);
  luaL_pushresult(&b);
  lua_pushinteger(L, n);
  return 2;
}

}  // namespace

void installLinearPatterns(lua_State* L) {
  luaL_newmetatable(L, kPatternMeta);
  lua_pushcfunction(L, collectCompiled);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_getglobal(L, "string");
  // find, match and gsub share the anchored and plain caches; gmatch has its own.
  lua_createtable(L, 1, 8);  // anchored
  lua_createtable(L, 1, 8);  // free (gmatch)
  lua_createtable(L, 1, 8);  // plain
  const struct {
    const char* name;
    lua_CFunction fn;
  } fns[] = {{"find", strFind}, {"match", strMatch}, {"gmatch", strGmatch}, {"gsub", strGsub}};
  for (const auto& f : fns) {
    lua_pushvalue(L, -3);
    lua_pushvalue(L, -3);
    lua_pushvalue(L, -3);
    lua_pushcclosure(L, f.fn, 3);
    lua_setfield(L, -5, f.name);
  }
  lua_pop(L, 4);
}

}  // namespace tahua
