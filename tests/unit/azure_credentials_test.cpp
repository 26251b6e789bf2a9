// Entra ID's certificate credential (src/cloud_auth/azure_credentials.cpp): a
// certificate and its key read from one PEM file (either order), the x5t#S256
// thumbprint checked against OpenSSL's own X509_digest, the client assertion's RS256
// signature verified with the certificate's public key and its claims read back; a file
// without a certificate, or with another key's, refused without quoting the key. And the
// token answers of Entra and of the managed identity endpoints (expires_in as a number
// or text, expires_on), and Entra's refusals reduced to their first line.
#include <gtest/gtest.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <boost/json.hpp>

#include "cloud_auth/azure_credentials.h"
#include "cloud_auth/token_endpoint.h"
#include "core/base64.h"
#include "jwt_test_keys.h"

namespace tahua::cloud_auth {
namespace azure_credentials_test {  // named, not anonymous: eight test files compile as one unit
namespace bj = boost::json;

std::string pemOf(int (*write)(BIO*, void*), void* object) {
  BIO* bio = BIO_new(BIO_s_mem());
  write(bio, object);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  return pem;
}

std::string keyPem(EVP_PKEY* pkey) {
  return pemOf([](BIO* b, void* k) { return PEM_write_bio_PrivateKey(b, static_cast<EVP_PKEY*>(k), nullptr, nullptr, 0, nullptr, nullptr); },
               pkey);
}

// A self-signed certificate for `pkey`.
struct SelfSigned {
  X509* cert = nullptr;
  explicit SelfSigned(EVP_PKEY* pkey) {
    cert = X509_new();
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 7);
    X509_gmtime_adj(X509_getm_notBefore(cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
    X509_set_pubkey(cert, pkey);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("tahua-unit"), -1, -1, 0);
    X509_set_issuer_name(cert, name);
    X509_sign(cert, pkey, EVP_sha256());
  }
  ~SelfSigned() { X509_free(cert); }
  SelfSigned(const SelfSigned&) = delete;
  std::string pem() const {
    return pemOf([](BIO* b, void* c) { return PEM_write_bio_X509(b, static_cast<X509*>(c)); }, cert);
  }
  // The thumbprint as OpenSSL computes it, in base64url.
  std::string x5tS256() const {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    X509_digest(cert, EVP_sha256(), md, &size);
    return base64UrlEncode(std::string_view(reinterpret_cast<const char*>(md), size));
  }
};

bj::object part(const std::string& jwt, int index) {
  std::size_t start = 0;
  for (int i = 0; i < index; ++i) start = jwt.find('.', start) + 1;
  const auto end = jwt.find('.', start);
  return bj::parse(*base64UrlDecode(jwt.substr(start, end == std::string::npos ? std::string::npos : end - start))).as_object();
}

TEST(AzureCertificate, ThumbprintAndAClientAssertionTheCertificatesKeyVerifies) {
  const jwt::Signer keys(jwt::Alg::RS256, "k");
  const SelfSigned cert(keys.pkey);
  // The certificate first, then the key: both orders are read.
  auto read = azure::certificateFromPem(cert.pem() + keyPem(keys.pkey));
  ASSERT_TRUE(std::holds_alternative<azure::Certificate>(read)) << std::get<std::string>(read);
  const auto& c = std::get<azure::Certificate>(read);
  EXPECT_EQ(c.x5t_s256, cert.x5tS256());
  EXPECT_EQ(c.x5t_s256.size(), 43u);  // 32 bytes, base64url without padding

  const std::string endpoint = azure::tokenEndpoint("https://login.microsoftonline.us/", "contoso.onmicrosoft.com");
  EXPECT_EQ(endpoint, "https://login.microsoftonline.us/contoso.onmicrosoft.com/oauth2/v2.0/token");
  const std::int64_t now = 1'900'000'000;
  const std::string assertion = azure::clientAssertion(c, "app-id", endpoint, now);
  ASSERT_EQ(std::count(assertion.begin(), assertion.end(), '.'), 2);
  const bj::object header = part(assertion, 0);
  EXPECT_EQ(header.at("alg").as_string(), "RS256");
  EXPECT_EQ(header.at("x5t#S256").as_string(), cert.x5tS256());
  const bj::object claims = part(assertion, 1);
  EXPECT_EQ(claims.at("aud").as_string(), endpoint);
  EXPECT_EQ(claims.at("iss").as_string(), "app-id");
  EXPECT_EQ(claims.at("sub").as_string(), "app-id");
  EXPECT_EQ(claims.at("iat").as_int64(), now);
  EXPECT_EQ(claims.at("nbf").as_int64(), now);
  EXPECT_EQ(claims.at("exp").as_int64(), now + 600);
  EXPECT_EQ(claims.at("jti").as_string().size(), 36u);
  EXPECT_NE(part(azure::clientAssertion(c, "app-id", endpoint, now), 1).at("jti"), claims.at("jti"));

  // The signature, verified with the certificate's public key (not the private key's object).
  const auto dot = assertion.rfind('.');
  const std::string signed_part = assertion.substr(0, dot);
  const std::string signature = *base64UrlDecode(assertion.substr(dot + 1));
  auto verifies = [&](std::string_view data) {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    const bool ok = EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, X509_get0_pubkey(cert.cert)) == 1 &&
                    EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                                     reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1;
    EVP_MD_CTX_free(ctx);
    return ok;
  };
  EXPECT_TRUE(verifies(signed_part));
  std::string tampered = signed_part;
  tampered[tampered.size() - 2] ^= 1;
  EXPECT_FALSE(verifies(tampered));
}

TEST(AzureCertificate, RefusesAFileWithoutItsCertificateOrWithAnotherKeysWithoutQuotingTheKey) {
  const jwt::Signer keys(jwt::Alg::RS256, "k");
  const jwt::Signer other(jwt::Alg::RS256, "o");
  const std::string key = keyPem(keys.pkey);
  const std::string secret_line = key.substr(key.find('\n') + 1, 64);

  auto read = azure::certificateFromPem(key);
  ASSERT_TRUE(std::holds_alternative<std::string>(read));
  EXPECT_NE(std::get<std::string>(read).find("no certificate"), std::string::npos) << std::get<std::string>(read);

  const SelfSigned others(other.pkey);
  read = azure::certificateFromPem(key + others.pem());
  ASSERT_TRUE(std::holds_alternative<std::string>(read));
  EXPECT_EQ(std::get<std::string>(read), "the private key is not the first certificate's key");

  const SelfSigned own(keys.pkey);
  read = azure::certificateFromPem(own.pem());
  ASSERT_TRUE(std::holds_alternative<std::string>(read));  // a certificate alone: no key
  const jwt::Signer ec(jwt::Alg::ES256, "e");
  const SelfSigned ec_cert(ec.pkey);
  read = azure::certificateFromPem(keyPem(ec.pkey) + ec_cert.pem());
  ASSERT_TRUE(std::holds_alternative<std::string>(read));
  EXPECT_NE(std::get<std::string>(read).find("not an RSA key"), std::string::npos);
  for (const auto& r : {azure::certificateFromPem(key), azure::certificateFromPem(key + others.pem())})
    EXPECT_EQ(std::get<std::string>(r).find(secret_line), std::string::npos);
}

TEST(EntraAnswers, ExpiresInAsNumberOrTextExpiresOnAndTheFirstLineOfARefusal) {
  OutboundResponse r;
  r.status = 200;
  r.body = R"({"token_type":"Bearer","expires_in":"3599","ext_expires_in":"3599","access_token":"tok-1"})";
  auto got = tokenFromAnswer("the Entra ID token endpoint", "https://login/t/oauth2/v2.0/token", r, {});
  ASSERT_TRUE(std::holds_alternative<AccessToken>(got)) << std::get<std::string>(got);
  auto left = std::chrono::duration_cast<std::chrono::seconds>(std::get<AccessToken>(got).expires_at - WallClock::now()).count();
  EXPECT_GE(left, 3597);
  EXPECT_LE(left, 3599);

  r.body = R"({"access_token":"tok-2","expires_on":")" + std::to_string(nowSeconds() + 600) +
           R"(","resource":"https://cognitiveservices.azure.com","token_type":"Bearer"})";
  got = tokenFromAnswer("the managed identity endpoint", "http://169.254.169.254/metadata/identity/oauth2/token", r, {});
  ASSERT_TRUE(std::holds_alternative<AccessToken>(got)) << std::get<std::string>(got);
  left = std::chrono::duration_cast<std::chrono::seconds>(std::get<AccessToken>(got).expires_at - WallClock::now()).count();
  EXPECT_GE(left, 598);
  EXPECT_LE(left, 600);

  r.body = R"({"access_token":"tok-3","expires_in":"soon"})";
  got = tokenFromAnswer("x", "u", r, {});
  ASSERT_TRUE(std::holds_alternative<std::string>(got));
  EXPECT_NE(std::get<std::string>(got).find("lifetime out of bounds"), std::string::npos);

  r.status = 401;
  r.body = R"({"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided. Got s3cret.\r\nTrace ID: 1\r\nCorrelation ID: 2","error_codes":[7000215]})";
  got = tokenFromAnswer("the Entra ID token endpoint", "https://login/t/oauth2/v2.0/token", r, {"s3cret"});
  ASSERT_TRUE(std::holds_alternative<std::string>(got));
  EXPECT_EQ(std::get<std::string>(got),
            "the Entra ID token endpoint https://login/t/oauth2/v2.0/token answered HTTP 401: invalid_client: "
            "AADSTS7000215: Invalid client secret provided. Got [redacted].");
}

}  // namespace azure_credentials_test
}  // namespace tahua::cloud_auth
