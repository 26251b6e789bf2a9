#include "filters/cache/cache_key.h"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include "core/sha256.h"

namespace tahua {
namespace bj = boost::json;
namespace {

void number(double d, std::string& out) {
  // A literal beyond the double range reads as infinity: written back as such a literal
  // (valid JSON, where to_chars would write "inf").
  if (std::isinf(d)) {
    out += d > 0 ? "1e999" : "-1e999";
    return;
  }
  // Boost.JSON 1.81 reads "0e3000" as NaN (0 times an overflowed power): it is 0.
  if (std::isnan(d)) {
    out += '0';
    return;
  }
  // Integral values within 2^53 print as integers (1.0 is 1, as in RFC 8785).
  if (std::isfinite(d) && std::trunc(d) == d && std::fabs(d) < 9007199254740992.0) {
    out += std::to_string(static_cast<long long>(d));
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);  // shortest text that reads back as d
  out.append(buf, ec == std::errc{} ? end : buf);
}

void member(const bj::key_value_pair* kv, std::string& out) {
  out += bj::serialize(bj::string_view(kv->key()));
  out += ':';
  canonicalJson(kv->value(), out);
}

void object(const bj::object& o, std::string& out, const std::vector<std::string_view>& skip) {
  std::vector<const bj::key_value_pair*> members;
  members.reserve(o.size());
  for (const auto& kv : o)
    if (std::find(skip.begin(), skip.end(), std::string_view(kv.key())) == skip.end()) members.push_back(&kv);
  std::sort(members.begin(), members.end(), [](auto* a, auto* b) { return std::string_view(a->key()) < std::string_view(b->key()); });
  out += '{';
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i) out += ',';
    member(members[i], out);
  }
  out += '}';
}

}  // namespace

void canonicalJson(const bj::value& v, std::string& out) {
  switch (v.kind()) {
    case bj::kind::null: out += "null"; break;
    case bj::kind::bool_: out += v.get_bool() ? "true" : "false"; break;
    case bj::kind::int64: out += std::to_string(v.get_int64()); break;
    case bj::kind::uint64: out += std::to_string(v.get_uint64()); break;
    case bj::kind::double_: number(v.get_double(), out); break;
    case bj::kind::string: out += bj::serialize(v.get_string()); break;
    case bj::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v.get_array()) {
        if (!first) out += ',';
        first = false;
        canonicalJson(e, out);
      }
      out += ']';
      break;
    }
    case bj::kind::object: object(v.get_object(), out, {}); break;
  }
}

namespace {
std::string hex16(std::string_view text) {
  std::string h = toHex(sha256(text));
  h.resize(16);
  return h;
}
}  // namespace

std::string cacheNameHash(std::string_view text) { return hex16(text); }

std::string cacheKey(std::string_view tenant, std::string_view api_key, std::string_view model, std::string_view digest) {
  std::string k = "tahua:cache:t";
  k += hex16(tenant);
  k += ":k";
  k += hex16(api_key);
  k += ":m";
  k += hex16(model);
  k += ':';
  k.append(digest);
  return k;
}

std::string cacheKeyPattern(std::string_view tenant, std::string_view api_key, std::string_view model) {
  std::string k = "tahua:cache:t";
  k += tenant.empty() ? std::string("*") : hex16(tenant);
  k += ":k";
  k += api_key.empty() ? std::string("*") : hex16(api_key);
  k += ":m";
  k += model.empty() ? std::string("*") : hex16(model);
  k += ":*";
  return k;
}

std::string canonicalRequest(const bj::object& body, bool keep_user) {
  std::string out;
  out.reserve(256);
  std::vector<std::string_view> skip{"model", "stream", "stream_options"};
  if (!keep_user) skip.push_back("user");
  object(body, out, skip);
  return out;
}

}  // namespace tahua
