#include "cloud_auth/token_endpoint.h"

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>
#include <charconv>
#include <fstream>
#include <optional>

#include "core/json_read.h"
#include "core/utc_time.h"
#include "http/http_url.h"
#include "net/http_client.h"

namespace tahua::cloud_auth {

namespace bj = boost::json;

namespace {
// A token's life when its issuer gives none (OAuth2's expires_in is optional).
constexpr std::int64_t kDefaultLifetimeS = 3600;
constexpr std::size_t kMaxSaid = 300;

// An integer given as a JSON number or as decimal text ("3599"); nullopt otherwise.
std::optional<std::int64_t> integerOf(const bj::value& v) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64()) return static_cast<std::int64_t>(std::min<std::uint64_t>(v.get_uint64(), std::uint64_t(1) << 40));
  if (v.is_string()) {
    const std::string_view s = v.get_string();
    std::int64_t out = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return out;
  }
  return std::nullopt;
}
}  // namespace

bool readBoundedFile(const std::string& path, std::size_t max, std::string& text, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot read " + path;
    return false;
  }
  text.resize(max + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > max) {
    error = path + " is larger than " + std::to_string(max / 1024) + " KiB";
    return false;
  }
  return true;
}

std::string textField(const bj::object& o, std::string_view key) {
  const bj::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

std::string formBody(const std::vector<std::pair<std::string_view, std::string_view>>& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    if (!out.empty()) out += '&';
    out += boost::urls::encode(name, boost::urls::unreserved_chars);
    out += '=';
    out += boost::urls::encode(value, boost::urls::unreserved_chars);
  }
  return out;
}

bool headerSafe(std::string_view token) {
  if (token.empty() || token.size() > 8192) return false;
  for (char c : token)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) return false;
  return true;
}

std::string sayable(std::string text, const std::vector<std::string_view>& secrets) {
  for (std::string_view s : secrets) {
    if (s.empty()) continue;
    for (auto at = text.find(s); at != std::string::npos; at = text.find(s, at)) text.replace(at, s.size(), "[redacted]");
  }
  std::string out;
  for (char c : text) {
    if (out.size() >= kMaxSaid) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    out += u >= 0x20 && u != 0x7f ? c : ' ';
  }
  return out;
}

OutboundResponse callTokenIssuer(BlockingHttpClient& http, std::string method, const std::string& url, std::string body,
                                 std::vector<std::pair<std::string, std::string>> headers) {
  OutboundRequest req;
  req.method = std::move(method);
  std::string error;
  auto parsed = parseHttpUrl(url, &error, true);
  if (!parsed) {
    OutboundResponse r;
    r.error = error;
    return r;
  }
  req.url = std::move(*parsed);
  req.headers = std::move(headers);
  req.headers.emplace_back("Accept", "application/json");
  req.body = std::move(body);
  req.timeout = kTokenCallTimeout;
  return http.fetch(std::move(req));
}

OutboundResponse postForm(BlockingHttpClient& http, const std::string& url, std::string form) {
  return callTokenIssuer(http, "POST", url, std::move(form), {{"Content-Type", "application/x-www-form-urlencoded"}});
}

std::string callFailure(std::string_view what, std::string_view url, const OutboundResponse& r,
                        const std::vector<std::string_view>& secrets) {
  std::string out = std::string(what) + " " + std::string(url);
  if (r.status == 0) return out + " did not answer: " + sayable(r.error, secrets);
  out += " answered HTTP " + std::to_string(r.status);
  boost::system::error_code ec;
  const bj::value v = readJson(r.body, ec);
  std::string said;
  if (!ec && v.is_object()) {
    const bj::object& o = v.get_object();
    if (const bj::value* e = o.if_contains("error"); e && e->is_object()) {
      said = textField(e->get_object(), "message");
    } else {
      said = textField(o, "error");
      std::string description = textField(o, "error_description");
      if (description.empty()) description = textField(o, "message");
      // Entra's description goes on with "\r\nTrace ID: ...\r\nCorrelation ID: ...".
      description = description.substr(0, description.find_first_of("\r\n"));
      if (!description.empty()) said += (said.empty() ? "" : ": ") + description;
    }
  } else {
    said = r.body;
  }
  said = sayable(std::move(said), secrets);
  return said.empty() ? out : out + ": " + said;
}

FetchResult tokenFromAnswer(std::string_view what, std::string_view url, const OutboundResponse& r,
                            const std::vector<std::string_view>& secrets) {
  const std::string where = std::string(what) + " " + std::string(url);
  if (r.status < 200 || r.status > 299) return callFailure(what, url, r, secrets);
  boost::system::error_code ec;
  const bj::value v = readJson(r.body, ec);
  if (ec || !v.is_object()) return where + " answered with a body that is not JSON";
  const bj::object& o = v.get_object();
  AccessToken token;
  token.value = textField(o, "access_token");
  std::int64_t lifetime = kDefaultLifetimeS;
  if (token.value.empty()) {
    token.value = textField(o, "accessToken");
    const std::string expire = textField(o, "expireTime");
    // "2025-01-01T00:00:00Z", possibly with fractions of a second.
    std::string whole = expire.substr(0, expire.find('.'));
    if (!whole.empty() && whole.back() != 'Z') whole += 'Z';
    const std::int64_t at = parseUtcTime(whole);
    if (!token.value.empty()) {
      if (at < 0) return where + " answered without a valid expireTime";
      lifetime = at - nowSeconds();
    }
  } else if (const bj::value* e = o.if_contains("expires_in")) {
    // Relative, so immune to a skewed clock: preferred to expires_on.
    lifetime = integerOf(*e).value_or(-1);
  } else if (const bj::value* on = o.if_contains("expires_on")) {
    const auto at = integerOf(*on);
    lifetime = at ? *at - nowSeconds() : -1;
  }
  if (!headerSafe(token.value)) return where + " answered without a usable access token";
  if (lifetime <= 0 || lifetime > 24 * 3600)
    return where + " answered with a token lifetime out of bounds (" + std::to_string(lifetime) + " s)";
  token.expires_at = WallClock::now() + std::chrono::seconds(lifetime);
  return token;
}

std::int64_t nowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(WallClock::now().time_since_epoch()).count();
}

std::string fileName(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace tahua::cloud_auth
