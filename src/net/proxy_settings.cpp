#include "net/proxy_settings.h"

#include <openssl/evp.h>

#include <boost/url/parse.hpp>

namespace tahua {

std::optional<ProxySettings> parseProxyUrl(std::string url) {
  if (url.find("://") == std::string::npos) url = "http://" + url;
  auto parsed = boost::urls::parse_uri(url);
  if (!parsed || parsed->scheme() != "http" || parsed->host().empty()) return std::nullopt;
  ProxySettings s;
  s.enabled = true;
  s.host = std::string(parsed->host());
  s.port = parsed->has_port() ? parsed->port_number() : 80;
  if (parsed->has_userinfo()) {
    std::string userinfo = std::string(parsed->userinfo());
    std::string encoded(4 * ((userinfo.size() + 2) / 3) + 1, '\0');
    int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(encoded.data()),
                            reinterpret_cast<const unsigned char*>(userinfo.data()), static_cast<int>(userinfo.size()));
    encoded.resize(static_cast<std::size_t>(n));
    s.authorization = "Basic " + encoded;
  }
  return s;
}

}  // namespace tahua
