// What every credential family's calls to a token issuer share: a bounded file read, an
// OAuth2 form body, the blocking call with its timeout, and the answer read into an
// AccessToken or into a message safe to log and to show a client (every secret of the
// call replaced). Google's credentials (google_credentials.cpp) and Azure Entra ID's
// (azure_credentials.cpp) are built on it.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cloud_auth/token_source.h"
#include "http/outbound_call.h"

namespace tahua::cloud_auth {

// The longest a call to a token issuer may take.
inline constexpr Millis kTokenCallTimeout{10'000};
// The largest credentials file, certificate or subject token file read.
inline constexpr std::size_t kMaxCredentialFileBytes = 64 * 1024;

// The file's text into `text`, or false and why into `error` (at most `max` bytes).
bool readBoundedFile(const std::string& path, std::size_t max, std::string& text, std::string& error);

// A string field of `o`, or empty.
std::string textField(const boost::json::object& o, std::string_view key);

// application/x-www-form-urlencoded
std::string formBody(const std::vector<std::pair<std::string_view, std::string_view>>& fields);

// A bearer token must be one header-safe word: a CR or LF in it would add headers.
bool headerSafe(std::string_view token);

// Printable text for an error message: at most 300 characters, every one of `secrets`
// replaced (an endpoint may echo what it refused).
std::string sayable(std::string text, const std::vector<std::string_view>& secrets);

// A call with kTokenCallTimeout; a URL that does not parse is an answer with status 0.
OutboundResponse callTokenIssuer(BlockingHttpClient& http, std::string method, const std::string& url, std::string body,
                                 std::vector<std::pair<std::string, std::string>> headers);
// POST of a form to `url`.
OutboundResponse postForm(BlockingHttpClient& http, const std::string& url, std::string form);

// Why a call to `what` at `url` gave no token: no answer, or an error status with
// OAuth2's {"error","error_description"} (the description's first line: Entra's
// follows it with trace ids), Google's {"error":{"message"}} or {"message"} said.
std::string callFailure(std::string_view what, std::string_view url, const OutboundResponse& r,
                        const std::vector<std::string_view>& secrets);

// A token answer: {"access_token", "expires_in"} (a number or a numeric string; or
// "expires_on", epoch seconds, as Azure's managed identity endpoints say it), or the IAM
// credentials API's {"accessToken","expireTime"}.
FetchResult tokenFromAnswer(std::string_view what, std::string_view url, const OutboundResponse& r,
                            const std::vector<std::string_view>& secrets);

std::int64_t nowSeconds();
// The last part of a path, for descriptions.
std::string fileName(const std::string& path);

}  // namespace tahua::cloud_auth
