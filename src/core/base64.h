// Base64 through OpenSSL (EVP_EncodeBlock / EVP_DecodeBlock), for bytes kept in JSON;
// and base64url without padding (RFC 4648 section 5), the alphabet of JWTs and JWKs.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tahua {

std::string base64Encode(std::string_view bytes);
std::optional<std::string> base64Decode(std::string_view text);  // nullopt if malformed

std::string base64UrlEncode(std::string_view bytes);  // no padding
// Strict: '-' and '_' (never '+' or '/'), no padding, no whitespace, and the unused low
// bits of the last character zero (one text per byte string). nullopt if malformed.
std::optional<std::string> base64UrlDecode(std::string_view text);

}  // namespace tahua
