// AWS Signature Version 4 (header form) for the requests the gateway sends to AWS
// services (Bedrock Runtime). Pure computation: the caller adds the returned headers to
// the request it sends, byte for byte as signed.
//
// What is signed: `host`, `x-amz-date`, `x-amz-security-token` (when the credentials
// carry a session token), `x-amz-content-sha256` (only when asked: S3 needs it, Bedrock
// does not) and the extra headers the caller lists (content-type, accept, ...). The
// payload hash always goes into the canonical request.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace tahua {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials (STS); empty for long-term keys
};

using AwsHeaderList = std::vector<std::pair<std::string, std::string>>;

struct SigV4Request {
  std::string_view method = "POST";
  std::string_view host;   // the Host header value exactly as sent (with ":port" if sent)
  std::string_view path = "/";  // as sent on the wire, already percent-encoded
  std::string_view query;  // raw query string without '?', may be empty
  AwsHeaderList headers;   // extra headers to sign, any case; never host/x-amz-*/authorization
  std::string_view payload;
  std::string_view region;   // "us-east-1"
  std::string_view service;  // "bedrock"
  std::chrono::system_clock::time_point time;
  // Every service but S3 signs the path URI-encoded once more (so "%3A" is signed as
  // "%253A"). S3 signs the path as sent.
  bool double_encode_path = true;
  bool add_content_sha256 = false;  // send and sign x-amz-content-sha256
};

struct SigV4Result {
  // The headers to add to the request: Authorization, X-Amz-Date, then
  // X-Amz-Security-Token / X-Amz-Content-Sha256 when applicable.
  AwsHeaderList headers;
  std::string signature;          // hex
  std::string canonical_request;  // for tests and debugging; holds no secret key
  std::string string_to_sign;
};

// An Error (Internal: these are the adapter's own inputs) when the credentials are
// missing, region/service/method are malformed or a header name/value could not be sent
// as is (control characters, CR/LF).
std::variant<SigV4Result, Error> signAwsV4(const SigV4Request& request, const AwsCredentials& credentials);

// RFC 3986 percent-encoding as AWS defines it: everything but A-Z a-z 0-9 - . _ ~ is
// encoded as %XY (upper-case hex), byte by byte (UTF-8 stays as its bytes); '/' is kept
// when !encode_slash.
std::string awsUriEncode(std::string_view text, bool encode_slash);

// Lower-case hex SHA-256 of `data` (empty on an OpenSSL failure, which does not happen
// with the default provider).
std::string awsSha256Hex(std::string_view data);

}  // namespace tahua
