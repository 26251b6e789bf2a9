#include "core/json_text.h"

#include <boost/json.hpp>
#include <charconv>
#include <cmath>

namespace tahua {
namespace {

void write(const boost::json::value& v, std::string& out) {
  switch (v.kind()) {
    case boost::json::kind::double_: {
      const double d = v.get_double();
      out += std::isfinite(d) ? numberText(d) : std::string("null");
      return;
    }
    case boost::json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v.get_array()) {
        if (!first) out += ',';
        first = false;
        write(e, out);
      }
      out += ']';
      return;
    }
    case boost::json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.get_object()) {
        if (!first) out += ',';
        first = false;
        out += boost::json::serialize(boost::json::value(k));
        out += ':';
        write(e, out);
      }
      out += '}';
      return;
    }
    default:
      out += boost::json::serialize(v);  // null, bool, integers, strings (escaped)
  }
}

}  // namespace

std::string numberText(double d) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return ec == std::errc() ? std::string(buf, end) : std::string("0");
}

std::string jsonText(const boost::json::value& v) {
  std::string out;
  write(v, out);
  return out;
}

}  // namespace tahua
