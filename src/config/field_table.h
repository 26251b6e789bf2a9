// The one description of every config field: its name, type, default, bounds, whether a
// reload applies it, and a line of documentation. The loader reads each mapping through
// its table (unknown keys are refused, numbers and durations bounded by the table's
// figures), and `tahua --config-reference` prints the same tables as
// docs/configuration.md, so a field cannot be accepted without being documented.
// Free of YAML and Asio: the provider kinds and the reference printer include it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tahua::schema {

enum class Kind : std::uint8_t {
  Integer,   // a non-negative integer within [min, max]
  Number,    // a non-negative number up to max
  Boolean,
  String,    // min 1: must not be empty
  Duration,  // "250ms", "5s", "2m", "1h", "30d"; min in milliseconds
  Choice,    // one of the names in `bound` ("a | b | c")
  List,      // a sequence (its items: the table at path[] when they are mappings)
  Map,       // a mapping of names the user chooses (its values: the table at path.*)
  Section,   // a mapping with fixed fields: the table at this field's path
  Any,       // a value of several shapes, told in the doc
};

// What a config reload (SIGHUP, a changed file, PUT /admin/v1/config) does to the field.
enum class Reload : std::uint8_t {
  Live,     // applies to requests that start after the reload
  Restart,  // read at start; a reload warns and keeps the running value
};

struct Field {
  std::string_view name;
  Kind kind = Kind::Any;
  std::string_view fallback;  // the default as YAML; empty: none (required, or absent = off)
  std::string_view doc;
  double min = 0;
  double max = 0;  // 0 with min 0: unbounded
  std::string_view bound;  // Choice: "a | b"; others: extra words after the figures
  Reload reload = Reload::Live;
  bool required = false;

  constexpr Field needed() const {
    Field f = *this;
    f.required = true;
    return f;
  }
  constexpr Field atRestart() const {
    Field f = *this;
    f.reload = Reload::Restart;
    return f;
  }
};

constexpr Field integer(std::string_view name, std::uint64_t min, std::uint64_t max, std::string_view fallback,
                        std::string_view doc) {
  return {name, Kind::Integer, fallback, doc, static_cast<double>(min), static_cast<double>(max), {}, Reload::Live, false};
}
constexpr Field number(std::string_view name, double max, std::string_view fallback, std::string_view doc,
                       std::string_view unit = {}) {
  return {name, Kind::Number, fallback, doc, 0, max, unit, Reload::Live, false};
}
constexpr Field boolean(std::string_view name, std::string_view fallback, std::string_view doc) {
  return {name, Kind::Boolean, fallback, doc, 0, 0, {}, Reload::Live, false};
}
constexpr Field string(std::string_view name, std::string_view fallback, std::string_view doc) {
  return {name, Kind::String, fallback, doc, 0, 0, {}, Reload::Live, false};
}
constexpr Field nonEmpty(std::string_view name, std::string_view fallback, std::string_view doc) {
  return {name, Kind::String, fallback, doc, 1, 0, {}, Reload::Live, false};
}
// `min_ms`: the shortest duration accepted.
constexpr Field duration(std::string_view name, std::uint64_t min_ms, std::string_view fallback, std::string_view doc) {
  return {name, Kind::Duration, fallback, doc, static_cast<double>(min_ms), 0, {}, Reload::Live, false};
}
constexpr Field choice(std::string_view name, std::string_view names, std::string_view fallback, std::string_view doc) {
  return {name, Kind::Choice, fallback, doc, 0, 0, names, Reload::Live, false};
}
constexpr Field list(std::string_view name, std::string_view fallback, std::string_view doc) {
  return {name, Kind::List, fallback, doc, 0, 0, {}, Reload::Live, false};
}
constexpr Field map(std::string_view name, std::string_view fallback, std::string_view doc) {
  return {name, Kind::Map, fallback, doc, 0, 0, {}, Reload::Live, false};
}
constexpr Field section(std::string_view name, std::string_view doc) { return {name, Kind::Section, {}, doc, 0, 0, {}, Reload::Live, false}; }
constexpr Field any(std::string_view name, std::string_view fallback, std::string_view doc) {
  return {name, Kind::Any, fallback, doc, 0, 0, {}, Reload::Live, false};
}

// One mapping's fields. `path` names it in the reference: "server", "server.uploads",
// "providers[]" (each item of the list), "models[].deployments[]". Constructing one
// registers it for the reference (tables are namespace-scope constants of the section
// loaders' files).
class Table {
 public:
  Table(std::string_view path, std::string_view doc, std::span<const Field> fields);

  std::string_view path;
  std::string_view doc;
  std::span<const Field> fields;

  const Field* find(std::string_view name) const {
    for (const Field& f : fields)
      if (f.name == name) return &f;
    return nullptr;
  }
};

// Every registered table, sorted by path (a section before its sub-sections).
std::vector<const Table*> tables();
const Table* findTable(std::string_view path);

// "integer", "duration", "one of: a | b", ... as the reference prints the type.
std::string kindName(const Field& f);
// "0-256", "min 1ms", ... ; empty when the field has no bound.
std::string boundText(const Field& f);

// The whole reference in Markdown (docs/configuration.md).
std::string reference();

}  // namespace tahua::schema
