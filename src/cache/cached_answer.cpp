#include "cache/response_cache.h"
#include "core/json_read.h"

#include <boost/json.hpp>

namespace tahua {
namespace bj = boost::json;
namespace {

std::int64_t intOr(const bj::object& o, std::string_view k, std::int64_t d) {
  const bj::value* v = o.if_contains(k);
  return v && v->is_int64() ? v->get_int64() : d;
}
std::string strOr(const bj::object& o, std::string_view k) {
  const bj::value* v = o.if_contains(k);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

}  // namespace

std::string CachedAnswer::serialize() const {
  bj::object h{{"v", 1},           {"e", endpoint},         {"s", streamed},          {"u", include_usage},
               {"st", status},     {"ct", content_type},    {"pt", usage.prompt_tokens}, {"ctk", usage.completion_tokens},
               {"cch", usage.cached_tokens}, {"t", tenant}, {"k", key},              {"m", model},
               {"x", expires_ms}, {"f", fresh_until_ms}};
  std::string out = bj::serialize(h);
  out.push_back('\n');
  out.append(body);
  return out;
}

std::optional<CachedAnswer> CachedAnswer::parse(std::string_view text) {
  const std::size_t nl = text.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  boost::system::error_code ec;
  bj::value v = readJson(text.substr(0, nl), ec);
  if (ec || !v.is_object() || intOr(v.get_object(), "v", 0) != 1) return std::nullopt;
  const bj::object& h = v.get_object();
  CachedAnswer a;
  a.endpoint = static_cast<std::uint8_t>(intOr(h, "e", 0));
  a.streamed = h.contains("s") && h.at("s").is_bool() && h.at("s").get_bool();
  a.include_usage = h.contains("u") && h.at("u").is_bool() && h.at("u").get_bool();
  a.status = static_cast<int>(intOr(h, "st", 200));
  a.content_type = strOr(h, "ct");
  a.usage.prompt_tokens = intOr(h, "pt", -1);
  a.usage.completion_tokens = intOr(h, "ctk", -1);
  a.usage.cached_tokens = intOr(h, "cch", -1);
  a.tenant = strOr(h, "t");
  a.key = strOr(h, "k");
  a.model = strOr(h, "m");
  a.expires_ms = intOr(h, "x", 0);
  a.fresh_until_ms = intOr(h, "f", a.expires_ms);
  a.body.assign(text.substr(nl + 1));
  if (a.content_type.empty() || a.endpoint == 0) return std::nullopt;
  return a;
}

}  // namespace tahua
