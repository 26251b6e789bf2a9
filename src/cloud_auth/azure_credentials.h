// Microsoft Entra ID credentials, as Azure's identity libraries use them: an app
// registration's client credentials (a client secret, or a certificate whose key signs a
// client assertion), workload identity federation (AKS: a projected token file exchanged
// as the client assertion), and a managed identity (App Service / Container Apps'
// IDENTITY_ENDPOINT, else the instance metadata service). Each becomes a TokenSource
// (token_source.h) for the token cache; the secrets stay in the source.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "cloud_auth/jwt_assertion.h"
#include "cloud_auth/token_source.h"

namespace tahua::cloud_auth::azure {

inline constexpr std::string_view kDefaultAuthorityHost = "https://login.microsoftonline.com";
inline constexpr std::string_view kCognitiveServicesScope = "https://cognitiveservices.azure.com/.default";
inline constexpr std::string_view kImdsAddress = "http://169.254.169.254";
inline constexpr std::string_view kClientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
// A client assertion's life: Entra accepts at most ten minutes.
inline constexpr std::int64_t kAssertionLifetimeS = 600;

// {authority_host}/{tenant}/oauth2/v2.0/token
std::string tokenEndpoint(std::string_view authority_host, std::string_view tenant_id);

// A certificate credential: the private key and the certificate from one PEM file.
struct Certificate {
  std::shared_ptr<const RsaKey> key;
  std::string x5t_s256;  // base64url of the SHA-256 of the DER certificate (the JWT header's x5t#S256)
  std::string digest;    // of the file's content: the cache key changes when the file does
};

// Reads the PEM text (a private key and its certificate, in either order; a chain's
// other certificates may follow). The error says what is wrong (no certificate, not an
// RSA key, a key that is not the certificate's), never quoting the key.
std::variant<Certificate, std::string> certificateFromPem(std::string_view pem);
std::variant<Certificate, std::string> readCertificateFile(const std::string& path);

// The client assertion a certificate credential sends: an RS256 JWT with x5t#S256 in
// its header; aud the token endpoint, iss and sub the client id, a unique jti, nbf and
// iat `now`, exp ten minutes later. Empty if signing failed.
std::string clientAssertion(const Certificate& cert, std::string_view client_id, std::string_view token_endpoint,
                            std::int64_t now);

// An app registration (or a workload identity's) at a tenant's token endpoint.
struct ClientCredentials {
  std::string authority_host;  // without a trailing slash
  std::string tenant_id;
  std::string client_id;
  std::string scope;  // https://cognitiveservices.azure.com/.default
};

std::unique_ptr<TokenSource> clientSecretSource(ClientCredentials c, std::string secret);
std::unique_ptr<TokenSource> certificateSource(ClientCredentials c, std::string path, Certificate cert);
// The file's token (rotated by the kubelet) is read again for every fetch.
std::unique_ptr<TokenSource> federatedTokenSource(ClientCredentials c, std::string token_file);

// Where a managed identity's tokens come from: App Service / Container Apps'
// IDENTITY_ENDPOINT with IDENTITY_HEADER when both are set, else the instance metadata
// service (at AZURE_POD_IDENTITY_AUTHORITY_HOST when that is set, as Azure's identity
// libraries allow, else 169.254.169.254).
struct ManagedIdentityEndpoint {
  std::string url;     // without a query
  std::string header;  // IDENTITY_HEADER's value (secret); empty: the metadata service
  bool appService() const { return !header.empty(); }
};
ManagedIdentityEndpoint managedIdentityEndpoint();

// `resource`: the scope without "/.default"; `client_id`: a user-assigned identity's,
// empty for the system-assigned one.
std::unique_ptr<TokenSource> managedIdentitySource(ManagedIdentityEndpoint endpoint, std::string resource,
                                                   std::string client_id);

}  // namespace tahua::cloud_auth::azure
