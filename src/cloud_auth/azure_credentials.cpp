#include "cloud_auth/azure_credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include <boost/json/object.hpp>
#include <cstdio>
#include <cstdlib>

#include "cloud_auth/token_endpoint.h"
#include "core/base64.h"
#include "core/sha256.h"
#include "net/http_client.h"

namespace tahua::cloud_auth::azure {

namespace bj = boost::json;

namespace {

// A jti: 128 random bits as a UUID-shaped string.
std::string uniqueId() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return {};
  char out[37];
  std::snprintf(out, sizeof out, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", bytes[0],
                bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10],
                bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
  return out;
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' || text.back() == '\t'))
    text.pop_back();
  return text;
}

// ---- client credentials (RFC 6749 4.4) at a tenant's v2.0 token endpoint ------------

class ClientCredentialsSource : public TokenSource {
 public:
  explicit ClientCredentialsSource(ClientCredentials c)
      : c_(std::move(c)), token_url_(tokenEndpoint(c_.authority_host, c_.tenant_id)) {}

 protected:
  // The token endpoint's answer to client_credentials with `proof` (the secret, or an
  // assertion) added; `proof`'s value is redacted from any message.
  FetchResult exchange(BlockingHttpClient& http, std::string_view proof_field, std::string_view proof) const {
    std::vector<std::pair<std::string_view, std::string_view>> form{
        {"grant_type", "client_credentials"}, {"client_id", c_.client_id}, {"scope", c_.scope}};
    if (proof_field == "client_assertion") form.emplace_back("client_assertion_type", kClientAssertionType);
    form.emplace_back(proof_field, proof);
    const auto r = postForm(http, token_url_, formBody(form));
    return tokenFromAnswer("the Entra ID token endpoint", token_url_, r, {proof});
  }
  std::string who() const { return c_.client_id + " (tenant " + c_.tenant_id; }

  ClientCredentials c_;
  std::string token_url_;
};

class ClientSecretSource final : public ClientCredentialsSource {
 public:
  ClientSecretSource(ClientCredentials c, std::string secret)
      : ClientCredentialsSource(std::move(c)), secret_(std::move(secret)) {}
  std::string describe() const override { return "Entra ID app " + who() + ", client secret)"; }
  FetchResult fetch(BlockingHttpClient& http) override { return exchange(http, "client_secret", secret_); }

 private:
  std::string secret_;
};

class CertificateSource final : public ClientCredentialsSource {
 public:
  CertificateSource(ClientCredentials c, std::string path, Certificate cert)
      : ClientCredentialsSource(std::move(c)), path_(std::move(path)), cert_(std::move(cert)) {}
  std::string describe() const override { return "Entra ID app " + who() + ", certificate " + fileName(path_) + ")"; }
  FetchResult fetch(BlockingHttpClient& http) override {
    // A new assertion for every fetch: each has its own jti and a ten-minute life.
    const std::string assertion = clientAssertion(cert_, c_.client_id, token_url_, nowSeconds());
    if (assertion.empty()) return "cannot sign the client assertion with the key of " + describe();
    return exchange(http, "client_assertion", assertion);
  }

 private:
  std::string path_;
  Certificate cert_;
};

class FederatedTokenSource final : public ClientCredentialsSource {
 public:
  FederatedTokenSource(ClientCredentials c, std::string file) : ClientCredentialsSource(std::move(c)), file_(std::move(file)) {}
  std::string describe() const override { return "workload identity " + who() + ", " + file_ + ")"; }
  FetchResult fetch(BlockingHttpClient& http) override {
    // Read each time: the kubelet rotates the projected token.
    std::string token, why;
    if (!readBoundedFile(file_, kMaxCredentialFileBytes, token, why)) return "the federated token file: " + why;
    token = trimmed(std::move(token));
    if (token.empty()) return "the federated token file " + file_ + " is empty";
    return exchange(http, "client_assertion", token);
  }

 private:
  std::string file_;
};

// ---- a managed identity -------------------------------------------------------------

class ManagedIdentitySource final : public TokenSource {
 public:
  ManagedIdentitySource(ManagedIdentityEndpoint endpoint, std::string resource, std::string client_id)
      : endpoint_(std::move(endpoint)), resource_(std::move(resource)), client_id_(std::move(client_id)) {}

  std::string describe() const override {
    return "managed identity " + (client_id_.empty() ? std::string("(system-assigned)") : client_id_) + " (" +
           (endpoint_.appService() ? "IDENTITY_ENDPOINT " : "the instance metadata service ") + endpoint_.url + ")";
  }

  FetchResult fetch(BlockingHttpClient& http) override {
    std::vector<std::pair<std::string_view, std::string_view>> query{
        {"api-version", endpoint_.appService() ? "2019-08-01" : "2018-02-01"}, {"resource", resource_}};
    if (!client_id_.empty()) query.emplace_back("client_id", client_id_);
    std::vector<std::pair<std::string, std::string>> headers;
    if (endpoint_.appService()) headers.emplace_back("X-IDENTITY-HEADER", endpoint_.header);
    else headers.emplace_back("Metadata", "true");
    const std::string url = endpoint_.url + "?" + formBody(query);
    const auto r = callTokenIssuer(http, "GET", url, {}, std::move(headers));
    const std::string what = "the managed identity endpoint";
    if (r.status == 0 && !endpoint_.appService())
      return "no managed identity: the instance metadata service " + endpoint_.url + " did not answer (" +
             sayable(r.error, {endpoint_.header}) +
             "); off Azure, set azure.client_secret_env, certificate_file or federated_token_file";
    return tokenFromAnswer(what, endpoint_.url, r, {endpoint_.header});
  }

 private:
  ManagedIdentityEndpoint endpoint_;
  std::string resource_;
  std::string client_id_;
};

}  // namespace

std::string tokenEndpoint(std::string_view authority_host, std::string_view tenant_id) {
  std::string out(authority_host);
  while (!out.empty() && out.back() == '/') out.pop_back();
  out.append("/").append(tenant_id).append("/oauth2/v2.0/token");
  return out;
}

std::variant<Certificate, std::string> certificateFromPem(std::string_view pem) {
  if (pem.size() > kMaxCredentialFileBytes) return std::string("the certificate file is longer than 64 KiB");
  auto key = RsaKey::fromPem(pem);
  if (auto* why = std::get_if<std::string>(&key)) return *why;
  if (pem.find("-----BEGIN CERTIFICATE-----") == std::string_view::npos)
    return std::string("no certificate (-----BEGIN CERTIFICATE-----) next to the private key");
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (!bio) return std::string("out of memory reading the certificate");
  // The first certificate is the credential's own (a chain's others follow it).
  X509* cert = PEM_read_bio_X509(bio, nullptr, [](char*, int, int, void*) { return 0; }, nullptr);
  BIO_free(bio);
  ERR_clear_error();
  if (!cert) return std::string("the certificate cannot be read (not a PEM X.509 certificate)");
  Certificate out;
  out.key = std::get<std::shared_ptr<const RsaKey>>(std::move(key));
  const bool matches = EVP_PKEY_eq(X509_get0_pubkey(cert), static_cast<const EVP_PKEY*>(out.key->pkey())) == 1;
  unsigned char* der = nullptr;
  const int der_size = i2d_X509(cert, &der);
  X509_free(cert);
  ERR_clear_error();
  if (der_size <= 0) return std::string("the certificate cannot be encoded (DER)");
  const Sha256 thumbprint = sha256(std::string_view(reinterpret_cast<const char*>(der), static_cast<std::size_t>(der_size)));
  OPENSSL_free(der);
  if (!matches) return std::string("the private key is not the first certificate's key");
  out.x5t_s256 = base64UrlEncode(std::string_view(reinterpret_cast<const char*>(thumbprint.data()), thumbprint.size()));
  out.digest = toHex(sha256(pem)).substr(0, 16);
  return out;
}

std::variant<Certificate, std::string> readCertificateFile(const std::string& path) {
  std::string text, why;
  if (!readBoundedFile(path, kMaxCredentialFileBytes, text, why)) return why;
  return certificateFromPem(text);
}

std::string clientAssertion(const Certificate& cert, std::string_view client_id, std::string_view token_endpoint,
                            std::int64_t now) {
  const std::string jti = uniqueId();
  if (jti.empty()) return {};
  const bj::object claims{{"aud", token_endpoint}, {"iss", client_id}, {"sub", client_id}, {"jti", jti},
                          {"nbf", now},           {"iat", now},       {"exp", now + kAssertionLifetimeS}};
  return signJwt(*cert.key, claims, {{"x5t#S256", cert.x5t_s256}});
}

std::unique_ptr<TokenSource> clientSecretSource(ClientCredentials c, std::string secret) {
  return std::make_unique<ClientSecretSource>(std::move(c), std::move(secret));
}

std::unique_ptr<TokenSource> certificateSource(ClientCredentials c, std::string path, Certificate cert) {
  return std::make_unique<CertificateSource>(std::move(c), std::move(path), std::move(cert));
}

std::unique_ptr<TokenSource> federatedTokenSource(ClientCredentials c, std::string token_file) {
  return std::make_unique<FederatedTokenSource>(std::move(c), std::move(token_file));
}

ManagedIdentityEndpoint managedIdentityEndpoint() {
  ManagedIdentityEndpoint out;
  const char* endpoint = std::getenv("IDENTITY_ENDPOINT");
  const char* header = std::getenv("IDENTITY_HEADER");
  if (endpoint && *endpoint && header && *header) {
    out.url = endpoint;
    out.header = header;
    return out;
  }
  const char* host = std::getenv("AZURE_POD_IDENTITY_AUTHORITY_HOST");
  out.url = host && *host ? std::string(host) : std::string(kImdsAddress);
  while (!out.url.empty() && out.url.back() == '/') out.url.pop_back();
  out.url += "/metadata/identity/oauth2/token";
  return out;
}

std::unique_ptr<TokenSource> managedIdentitySource(ManagedIdentityEndpoint endpoint, std::string resource,
                                                   std::string client_id) {
  return std::make_unique<ManagedIdentitySource>(std::move(endpoint), std::move(resource), std::move(client_id));
}

}  // namespace tahua::cloud_auth::azure
