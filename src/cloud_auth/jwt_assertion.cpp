#include "cloud_auth/jwt_assertion.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <boost/json/serialize.hpp>

#include "core/base64.h"

namespace tahua::cloud_auth {

std::variant<std::shared_ptr<const RsaKey>, std::string> RsaKey::fromPem(std::string_view pem) {
  if (pem.size() > 64 * 1024) return std::string("the private key is longer than 64 KiB");
  if (pem.find("-----BEGIN") == std::string_view::npos) return std::string("the private key is not in PEM form");
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (!bio) return std::string("out of memory reading the private key");
  // No password callback: an encrypted key fails instead of prompting on a terminal.
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(bio, nullptr, [](char*, int, int, void*) { return 0; }, nullptr);
  BIO_free(bio);
  // OpenSSL's error queue may name the failing structure; never the key itself. It
  // is cleared so that a later TLS call does not report this error.
  ERR_clear_error();
  if (!pkey) return std::string("the private key cannot be read (not a PEM private key, or encrypted)");
  if (EVP_PKEY_get_base_id(pkey) != EVP_PKEY_RSA) {
    EVP_PKEY_free(pkey);
    return std::string("the private key is not an RSA key (RS256 needs one)");
  }
  return std::shared_ptr<const RsaKey>(new RsaKey(pkey));
}

RsaKey::~RsaKey() { EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_)); }

std::string RsaKey::signSha256(std::string_view data) const {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx) return {};
  std::string signature;
  std::size_t size = 0;
  if (EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, static_cast<EVP_PKEY*>(pkey_)) == 1 &&
      EVP_DigestSign(ctx, nullptr, &size, reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1) {
    signature.resize(size);
    if (EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(signature.data()), &size,
                       reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1)
      signature.resize(size);
    else
      signature.clear();
  }
  EVP_MD_CTX_free(ctx);
  ERR_clear_error();
  return signature;
}

std::string signJwt(const RsaKey& key, const boost::json::object& claims, const boost::json::object& extra_header) {
  boost::json::object header{{"alg", "RS256"}, {"typ", "JWT"}};
  for (const auto& [name, value] : extra_header) header[name] = value;
  std::string out = base64UrlEncode(boost::json::serialize(header));
  out += '.';
  out += base64UrlEncode(boost::json::serialize(claims));
  const std::string signature = key.signSha256(out);
  if (signature.empty()) return {};
  out += '.';
  out += base64UrlEncode(signature);
  return out;
}

}  // namespace tahua::cloud_auth
