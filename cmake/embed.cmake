# Turns a file into a C++ function returning its bytes (the dashboard page is built into
# the binary: one file to ship, no assets to find at run time).
#   cmake -DIN=<file> -DOUT=<file.cpp> -DNAME=<function> -P embed.cmake
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
get_filename_component(name_only "${IN}" NAME)
file(WRITE "${OUT}" "// Generated from ${name_only} by cmake/embed.cmake: edit that file, not this one.
#include <string_view>

namespace tahua {
namespace {
// unsigned: a byte above 0x7f (UTF-8 text) in a `char` initialiser is a narrowing error.
const unsigned char kBytes[] = {${bytes}0};
}  // namespace
std::string_view ${NAME}() { return {reinterpret_cast<const char*>(kBytes), sizeof kBytes - 1}; }
}  // namespace tahua
")
