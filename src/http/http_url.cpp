#include "http/http_url.h"

#include <boost/url/parse.hpp>

namespace tahua {

std::optional<HttpUrl> parseHttpUrl(std::string_view text, std::string* error, bool allow_https) {
  auto fail = [&](std::string why) -> std::optional<HttpUrl> {
    if (error) *error = std::move(why);
    return std::nullopt;
  };
  auto parsed = boost::urls::parse_uri(text);
  if (!parsed) return fail("not a URL");
  const bool tls = allow_https && parsed->scheme() == "https";
  if (parsed->scheme() != "http" && !tls) return fail(allow_https ? "only http:// and https:// are supported" : "only http:// is supported");
  if (parsed->host().empty()) return fail("no host");
  if (parsed->has_userinfo()) return fail("credentials in the URL are not supported (send a header)");
  // Boost.URL 1.81 reads "http://10.0.0.1.example.com" as host 10.0.0.1, path ".example.com".
  if (!parsed->encoded_path().empty() && parsed->encoded_path().front() != '/') return fail("the host is neither a name nor an address");
  HttpUrl u;
  u.tls = tls;
  u.host = parsed->host_address();
  if (!u.host.empty() && u.host.front() == '[') u.host = u.host.substr(1, u.host.size() - 2);
  u.port = parsed->has_port() ? std::string(parsed->port()) : tls ? "443" : "80";
  u.target = parsed->encoded_path().empty() ? "/" : std::string(parsed->encoded_path());
  if (parsed->has_query()) u.target.append("?").append(parsed->encoded_query());
  return u;
}

}  // namespace tahua
