// The node readers every section uses, and the one error formatter. Every error names
// file, line, column and the field path, so an operator can fix a typo without guessing.
#include <boost/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>

#include "config/loader_detail.h"
#include "core/json_read.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

// One set of fields for the top-level `timeouts`, a provider's and a route's: each
// overrides the one before it field by field.
constexpr Field kTimeoutFields[] = {
    duration("connect", 1, "5s", "TCP connect and TLS handshake (and an egress proxy's CONNECT)."),
    duration("first_byte", 1, "120s", "From the request sent to the response's head."),
    duration("idle", 1, "60s", "Between two reads of the response body (a stream: between two chunks)."),
    duration("total", 1, "600s", "The whole upstream exchange, per attempt."),
};
const Table kTimeouts("timeouts",
                      "Upstream timeouts of every provider; a provider's `timeouts`, then a matching route's, override "
                      "them field by field. Past one the attempt fails: 504 upstream_timeout unless a retry or a fallback "
                      "answers (a stream under way ends with an error event).",
                      kTimeoutFields);
const Table kProviderTimeouts("providers[].timeouts",
                              "The same fields as `timeouts`, over them for this provider (a field left out keeps the "
                              "top-level value).",
                              kTimeoutFields);
const Table kRouteTimeouts("routes[].timeouts",
                           "The same fields as `timeouts`, over the chosen provider's for the requests this route chose.",
                           kTimeoutFields);

}  // namespace

std::string configError(std::string_view file, const YAML::Mark& mark, std::string_view field, std::string_view msg) {
  std::string out(file);
  if (!mark.is_null()) out += ':' + std::to_string(mark.line + 1) + ':' + std::to_string(mark.column + 1);
  if (!field.empty()) {
    out += ": ";
    out += field;
  }
  out += ": ";
  out += msg;
  return out;
}

std::string Loader::fileOf(const std::string& field) const {
  if (!sources_) return source_;
  const auto end = field.find_first_of(".[");
  const std::string top = field.substr(0, end);
  if (top == "routes" && end != std::string::npos && field[end] == '[') {
    const std::size_t i = std::strtoul(field.c_str() + end + 1, nullptr, 10);
    if (i < sources_->routes.size()) return sources_->routes[i];
  }
  if (auto it = sources_->sections.find(top); it != sources_->sections.end()) return it->second;
  return source_;
}

std::string Loader::displayField(const std::string& field) const {
  if (!sources_ || field.rfind("routes[", 0) != 0) return field;
  const std::size_t i = std::strtoul(field.c_str() + 7, nullptr, 10);
  const auto close = field.find(']');
  if (i >= sources_->route_labels.size() || sources_->route_labels[i].empty() || close == std::string::npos) return field;
  return sources_->route_labels[i] + field.substr(close + 1);
}

void Loader::fail(const YAML::Node& node, const std::string& field, const std::string& msg) const {
  // An absent key's node has no position (yaml-cpp throws for it): the message names the
  // field without line and column rather than losing it to "invalid node".
  const YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
  throw ConfigFailure{configError(fileOf(field), mark, field.empty() ? "(root)" : displayField(field), msg)};
}

void Loader::checkKeys(const YAML::Node& map, const std::string& path, std::span<const std::string_view> allowed) {
  if (!map.IsMap()) fail(map, path, "expected a mapping");
  for (const auto& kv : map) {
    auto key = kv.first.as<std::string>();
    bool ok = false;
    for (auto a : allowed) ok = ok || a == key;
    if (!ok) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      fail(kv.first, join(path, key), "unknown field (allowed: " + list + ")");
    }
  }
}

void Loader::checkKeys(const YAML::Node& map, const std::string& path, const schema::Table& table,
                       std::span<const schema::Field> more) {
  if (!map.IsMap()) fail(map, path, "expected a mapping");
  for (const auto& kv : map) {
    const std::string& key = kv.first.Scalar();
    if (table.find(key)) continue;
    bool ok = false;
    for (const auto& f : more) ok = ok || f.name == key;
    if (ok) continue;
    std::string list;
    for (const auto& f : table.fields) list += (list.empty() ? "" : ", ") + std::string(f.name);
    for (const auto& f : more) list += ", " + std::string(f.name);
    fail(kv.first, join(path, key), "unknown field (allowed: " + list + ")");
  }
  // What a reload cannot change is remembered as written, so that it can say which.
  for (const auto& f : table.fields) {
    if (f.reload != schema::Reload::Restart) continue;
    const YAML::Node v = map[std::string(f.name)];
    restart_fields_[join(path, f.name)] = v ? YAML::Dump(v) : std::string(f.fallback);
  }
}

Fields::Fields(Loader& loader, const YAML::Node& map, std::string path, const schema::Table& table,
               std::span<const schema::Field> more)
    : loader_(loader), map_(map), path_(std::move(path)), table_(table) {
  loader_.checkKeys(map_, path_, table_, more);
}

YAML::Node Fields::operator[](std::string_view name) const {
  if (!table_.find(name))
    loader_.fail(map_, at(name), "internal: the loader reads a field its table lacks (" + std::string(table_.path) + ")");
  return map_[std::string(name)];
}

const schema::Field& Fields::field(std::string_view name, schema::Kind kind) const {
  const schema::Field* f = table_.find(name);
  if (!f || f->kind != kind)
    loader_.fail(map_, at(name), "internal: the loader reads a field its table lacks or types otherwise (" +
                                     std::string(table_.path) + ")");
  return *f;
}

YAML::Node Fields::present(const schema::Field& f) const {
  YAML::Node v = map_[std::string(f.name)];
  if (!v && f.required) loader_.fail(map_, at(f.name), "required");
  return v;
}

namespace {
std::string shown(std::uint64_t v) { return std::to_string(v); }
std::string shown(double v) { return std::to_string(v); }
std::string shown(bool v) { return v ? "true" : "false"; }
std::string shown(Millis v) { return std::to_string(v.count()) + "ms"; }
std::string shown(const std::string& v) { return "\"" + v + "\""; }
}  // namespace

template <class T>
void Fields::checkFallback(const schema::Field& f, const T& kept) {
  if (!fallbackCheck || f.fallback.empty()) return;
  T documented{};
  try {
    const YAML::Node n = YAML::Load(std::string(f.fallback));
    if (!n.IsScalar()) return;
    if constexpr (std::is_same_v<T, std::uint64_t>) documented = loader_.integer(n, at(f.name), 0, UINT64_MAX);
    else if constexpr (std::is_same_v<T, double>) documented = loader_.number(n, at(f.name), "a number", 1e300);
    else if constexpr (std::is_same_v<T, bool>) documented = loader_.boolean(n, at(f.name));
    else if constexpr (std::is_same_v<T, Millis>) documented = loader_.duration(n, at(f.name));
    else documented = loader_.str(n, at(f.name));
  } catch (const ConfigFailure&) {
    return;  // a default in words ("the route's"), not a value
  } catch (const YAML::Exception&) {
    return;
  }
  ++fallbackCheck->checked;
  if (!(documented == kept))
    fallbackCheck->drift.push_back(at(f.name) + ": the reference says " + shown(documented) + ", the loader keeps " + shown(kept));
}

bool Fields::read(std::string_view name, std::uint64_t& out) {
  const auto& f = field(name, schema::Kind::Integer);
  const YAML::Node v = present(f);
  if (!v) return checkFallback(f, out), false;
  out = loader_.integer(v, at(name), static_cast<std::uint64_t>(f.min), static_cast<std::uint64_t>(f.max));
  return true;
}

bool Fields::read(std::string_view name, double& out) {
  const auto& f = field(name, schema::Kind::Number);
  const YAML::Node v = present(f);
  if (!v) return checkFallback(f, out), false;
  const std::string what = f.bound.empty() ? std::string("a number") : std::string(f.bound);
  out = loader_.number(v, at(name), what.c_str(), f.max > 0 ? f.max : 1e6);
  return true;
}

bool Fields::read(std::string_view name, bool& out) {
  const auto& f = field(name, schema::Kind::Boolean);
  const YAML::Node v = present(f);
  if (!v) return checkFallback(f, out), false;
  out = loader_.boolean(v, at(name));
  return true;
}

bool Fields::read(std::string_view name, Millis& out) {
  const auto& f = field(name, schema::Kind::Duration);
  const YAML::Node v = present(f);
  if (!v) return checkFallback(f, out), false;
  out = loader_.duration(v, at(name), Millis(static_cast<Millis::rep>(f.min)));
  return true;
}

bool Fields::read(std::string_view name, std::string& out) {
  const schema::Field* f = table_.find(name);
  if (!f || (f->kind != schema::Kind::String && f->kind != schema::Kind::Choice)) field(name, schema::Kind::String);
  const YAML::Node v = present(*f);
  if (!v) return checkFallback(*f, out), false;
  out = f->min > 0 ? loader_.nonEmpty(v, at(name)) : loader_.str(v, at(name));
  if (f->kind == schema::Kind::Choice) {
    // "a | b | c": the value must be one of them.
    std::string_view names = f->bound;
    bool ok = false;
    while (!names.empty() && !ok) {
      const auto bar = names.find(" | ");
      ok = names.substr(0, bar) == out;
      names = bar == std::string_view::npos ? std::string_view{} : names.substr(bar + 3);
    }
    if (!ok) loader_.fail(v, at(name), "expected one of " + std::string(f->bound) + ", got \"" + out + "\"");
  }
  return true;
}

bool Fields::read(std::string_view name, std::vector<std::string>& out) {
  const YAML::Node v = present(field(name, schema::Kind::List));
  if (!v) return false;
  if (!v.IsSequence()) loader_.fail(v, at(name), "expected a list");
  out.clear();
  for (std::size_t i = 0; i < v.size(); ++i) out.push_back(loader_.nonEmpty(v[i], at(name) + "[" + std::to_string(i) + "]"));
  return true;
}

std::string Loader::str(const YAML::Node& node, const std::string& path) {
  if (!node.IsDefined()) fail(node, path, "required");  // a reader called for an absent key
  if (!node.IsScalar()) fail(node, path, "expected a string");
  return node.Scalar();
}

std::string Loader::nonEmpty(const YAML::Node& node, const std::string& path) {
  auto s = str(node, path);
  if (s.empty()) fail(node, path, "must not be empty");
  return s;
}

bool Loader::boolean(const YAML::Node& node, const std::string& path) {
  bool v = false;
  if (!node.IsDefined()) fail(node, path, "required");  // a reader called for an absent key
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, v)) fail(node, path, "expected true or false");
  return v;
}

std::uint64_t Loader::integer(const YAML::Node& node, const std::string& path, std::uint64_t min, std::uint64_t max) {
  if (!node.IsDefined()) fail(node, path, "required");  // a reader called for an absent key
  if (!node.IsScalar()) fail(node, path, "expected an integer");
  const std::string& s = node.Scalar();
  std::uint64_t v = 0;
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
    fail(node, path, "expected a non-negative integer, got \"" + s + "\"");
  v = std::stoull(s);
  if (v < min || v > max)
    fail(node, path, "must be between " + std::to_string(min) + " and " + std::to_string(max));
  return v;
}

double Loader::number(const YAML::Node& node, const std::string& path, const char* what, double max) {
  if (!node.IsDefined()) fail(node, path, "required");  // a reader called for an absent key
  if (!node.IsScalar()) fail(node, path, std::string("expected ") + what);
  const std::string& s = node.Scalar();
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !(v >= 0) || v > max) {
    char bound[32];
    std::snprintf(bound, sizeof bound, "%.15g", max);
    fail(node, path, std::string("expected a number from 0 to ") + bound + " (" + what + "), got \"" + s + "\"");
  }
  return v;
}

double Loader::price(const YAML::Node& node, const std::string& path) { return number(node, path, "USD per million tokens"); }

double Loader::percent(const YAML::Node& node, const std::string& path) {
  double v = number(node, path, "a percentage");
  if (v > 100) fail(node, path, "must be between 0 and 100");
  return v;
}

Millis Loader::duration(const YAML::Node& node, const std::string& path, Millis min) {
  if (!node.IsDefined()) fail(node, path, "required");  // a reader called for an absent key
  if (!node.IsScalar()) fail(node, path, "expected a duration such as 250ms, 5s, 2m");
  auto d = parseDuration(node.Scalar());
  if (!d) fail(node, path, "invalid duration \"" + node.Scalar() + "\" (use e.g. 250ms, 5s, 2m)");
  if (*d < min) fail(node, path, "must be at least " + std::to_string(min.count()) + "ms");
  return *d;
}

TimeoutOverrides Loader::timeoutOverrides(const YAML::Node& t, const std::string& tp) {
  Fields f(*this, t, tp, kTimeouts);  // the provider's and the route's tables have the same fields
  TimeoutOverrides o;
  const ProviderTimeouts base;  // what an absent field leaves (the reference's default)
  for (auto [name, out, kept] : {std::tuple{"connect", &o.connect, base.connect}, {"first_byte", &o.first_byte, base.first_byte},
                                 {"idle", &o.idle, base.idle}, {"total", &o.total, base.total}}) {
    Millis v = kept;
    if (f.read(name, v)) *out = v;
  }
  return o;
}

// A YAML scalar as JSON text: a quoted one is a string; a plain one may be a number, a
// boolean or null.
std::string jsonScalar(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() != "!") {
    if (s == "true" || s == "false" || s == "null") return s;
    boost::system::error_code ec;
    const boost::json::value v = readJson(s, ec);
    if (!ec && v.is_number()) return boost::json::serialize(v);
  }
  return boost::json::serialize(boost::json::value(s));
}


bool dnsLabel(std::string_view s, std::size_t max) {
  if (s.empty() || s.size() > max || s.front() == '-' || s.back() == '-') return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}

}  // namespace tahua::config_detail
