// Small accessors over boost::json values that never throw: a missing key or a value of
// the wrong type reads as absent, so codecs validate with plain ifs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

namespace tahua::json {

inline const boost::json::value* field(const boost::json::object& o, std::string_view key) { return o.if_contains(key); }

inline std::optional<std::string_view> str(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (!v || !v->is_string()) return std::nullopt;
  return std::string_view(v->get_string());
}

inline std::string_view strOr(const boost::json::object& o, std::string_view key, std::string_view fallback = {}) {
  return str(o, key).value_or(fallback);
}

inline const boost::json::object* obj(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_object() ? &v->get_object() : nullptr;
}

inline const boost::json::array* arr(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_array() ? &v->get_array() : nullptr;
}

inline std::optional<std::int64_t> integer(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) return static_cast<std::int64_t>(v->get_uint64());
  if (v->is_double() && v->get_double() >= 0 && v->get_double() < 9e18) return static_cast<std::int64_t>(v->get_double());
  return std::nullopt;
}

inline bool truthy(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_bool() && v->get_bool();
}

inline std::string quoted(std::string_view s) { return boost::json::serialize(boost::json::string_view(s.data(), s.size())); }

}  // namespace tahua::json
