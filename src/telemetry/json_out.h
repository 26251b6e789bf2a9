// Appending JSON to a buffer the caller owns: usage records and spans are written on
// the worker straight into the batch that goes to the exporter, with no document tree
// and no allocation per field (boost::json builds a tree, and its string serializer
// returns a new string per call).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace tahua::json_out {

// `s` as a JSON string, quotes included (control characters as \u00XX; bytes >= 0x80
// are copied: the gateway's strings are UTF-8 already).
void string(std::string& out, std::string_view s);
void integer(std::string& out, std::int64_t v);
void number(std::string& out, double v);  // %.17g, or null when not finite
// "2026-12-01T15:20:30.123Z" (milliseconds), quoted.
void time(std::string& out, std::chrono::system_clock::time_point t);

// `"key":` after a comma unless it opens the object.
inline void key(std::string& out, std::string_view k) {
  if (out.back() != '{') out.push_back(',');
  out.push_back('"');
  out.append(k);
  out.append("\":");
}

}  // namespace tahua::json_out
