// Google Cloud credentials, found the way Google's client libraries find them
// (Application Default Credentials): a credentials file (service_account,
// authorized_user, external_account) or the GCE/GKE metadata server; and a plain token
// file for anything else. Each becomes a TokenSource (token_source.h) for the token cache.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "cloud_auth/token_source.h"

namespace tahua::cloud_auth::google {

inline constexpr std::string_view kCloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform";
inline constexpr std::string_view kDefaultTokenUri = "https://oauth2.googleapis.com/token";
inline constexpr std::string_view kMetadataHost = "metadata.google.internal";

// A credentials file, read and checked (no network): its type, and what the config
// needs from it. The secrets stay in the source it makes.
struct CredentialsFile {
  std::string type;        // service_account | authorized_user | external_account
  std::string project_id;  // service_account's project_id, authorized_user's quota_project_id (may be empty)
  std::string digest;      // of the content: the cache key changes when the file does
  std::unique_ptr<TokenSource> source;
};

// Reads `path` (at most 64 KiB of JSON) and builds its source. The error names what is
// wrong ("type \"x\" is not supported ...", "service_account without client_email"),
// never a secret (the private key, a refresh token, a client secret).
std::variant<CredentialsFile, std::string> readCredentialsFile(const std::string& path);

// The metadata server's token of the instance's default service account. Its host is
// GCE_METADATA_HOST's ("host" or "host:port") when that is set, as Google's libraries do.
std::unique_ptr<TokenSource> metadataSource();
std::string metadataHost();

// A file holding a bearer token (kept fresh by something else: a sidecar, a CSI
// driver). Read again every minute; its token is taken as valid for two.
std::unique_ptr<TokenSource> tokenFileSource(std::string path);

// The well-known file `gcloud auth application-default login` writes
// ($HOME/.config/gcloud/application_default_credentials.json), if it exists; else empty.
std::string wellKnownCredentialsFile();

}  // namespace tahua::cloud_auth::google
