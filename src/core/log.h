// Operational logs: one JSON object per line on stderr. Callers pass key/value fields;
// the message and values are escaped by Boost.JSON, so nothing a client sent can break
// the line format.
#pragma once

#include <boost/json/object.hpp>
#include <string_view>

namespace tahua::log {

enum class Level { Debug, Info, Warn, Error };

void write(Level level, std::string_view msg, boost::json::object fields = {});
inline void info(std::string_view msg, boost::json::object fields = {}) { write(Level::Info, msg, std::move(fields)); }
inline void warn(std::string_view msg, boost::json::object fields = {}) { write(Level::Warn, msg, std::move(fields)); }
inline void error(std::string_view msg, boost::json::object fields = {}) { write(Level::Error, msg, std::move(fields)); }

// RFC 3339 UTC timestamp with milliseconds, e.g. 2026-11-30T03:01:25.123Z.
std::string nowRfc3339();

}  // namespace tahua::log
