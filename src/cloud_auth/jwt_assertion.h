// RS256-signed JWTs (RFC 7515 / 7519) made with OpenSSL: the assertion of OAuth2's
// jwt-bearer grant (RFC 7523) that a Google service account exchanges for an access
// token, and the client assertion of Azure Entra ID's certificate credentials.
#pragma once

#include <boost/json/object.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

namespace tahua::cloud_auth {

// An RSA private key, held by OpenSSL: the PEM text is not kept.
class RsaKey {
 public:
  // From a PEM private key (PKCS#8 "BEGIN PRIVATE KEY", or PKCS#1 "BEGIN RSA PRIVATE
  // KEY"). An error says what is wrong without quoting the key.
  static std::variant<std::shared_ptr<const RsaKey>, std::string> fromPem(std::string_view pem);
  ~RsaKey();
  RsaKey(const RsaKey&) = delete;
  RsaKey& operator=(const RsaKey&) = delete;

  // RSASSA-PKCS1-v1_5 with SHA-256 over `data`: the raw signature, or empty on failure.
  std::string signSha256(std::string_view data) const;
  void* pkey() const { return pkey_; }  // the EVP_PKEY (tests derive the public key)

 private:
  explicit RsaKey(void* pkey) : pkey_(pkey) {}
  void* pkey_;
};

// "header.payload.signature" in base64url: `claims` signed with `key`; the header is
// {"alg":"RS256","typ":"JWT"} plus `extra_header` (a "kid"). Empty if signing failed.
std::string signJwt(const RsaKey& key, const boost::json::object& claims, const boost::json::object& extra_header = {});

}  // namespace tahua::cloud_auth
