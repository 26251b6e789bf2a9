// Base64 through OpenSSL (EVP_EncodeBlock / EVP_DecodeBlock), for bytes kept in JSON.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tahua {

std::string base64Encode(std::string_view bytes);
std::optional<std::string> base64Decode(std::string_view text);  // nullopt if malformed

}  // namespace tahua
