// SHA-256 through OpenSSL, for API keys (stored and looked up only by their hash); and
// SHA-1 in hex, the name Redis gives a script (EVALSHA) and what its redis.sha1hex gives.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace tahua {

using Sha256 = std::array<unsigned char, 32>;

// One digest. Reuses a per-thread OpenSSL context and a digest fetched once, so a call
// costs the hash itself (no allocation, no provider lookup).
Sha256 sha256(std::string_view data);

std::string toHex(const Sha256& digest);

std::string sha1Hex(std::string_view data);

}  // namespace tahua
