// How one cloud credential gets an OAuth2 access token: a Google service account's
// signed assertion, the GCE metadata server, a token file; Azure Entra ID's client
// credentials, workload identity and managed identity. A source is called only on the
// token cache's refresher thread (token_cache.h), with that thread's blocking outbound
// client: never on a worker.
#pragma once

#include <chrono>
#include <string>
#include <variant>

namespace tahua {
class BlockingHttpClient;
}

namespace tahua::cloud_auth {

using WallClock = std::chrono::system_clock;

struct AccessToken {
  std::string value;                 // secret: never logged
  WallClock::time_point expires_at;  // when its issuer says it stops working
};

// A token, or why there is none: a message safe to log and to show a client (it never
// holds a secret: no key, no assertion, no token).
using FetchResult = std::variant<AccessToken, std::string>;

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // The credential, for logs and errors: "service account a@p.iam.gserviceaccount.com
  // (key.json)", "the metadata server (metadata.google.internal)".
  virtual std::string describe() const = 0;
  virtual FetchResult fetch(BlockingHttpClient& http) = 0;
};

}  // namespace tahua::cloud_auth
