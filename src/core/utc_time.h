// UTC times as config files and the admin API write them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tahua {

// "2027-01-31T00:00:00Z" or "2027-01-31" (midnight UTC) -> unix seconds; -1 if malformed
// (including dates that do not exist, such as 2027-02-30).
std::int64_t parseUtcTime(std::string_view s);
// unix seconds -> "2027-01-31T00:00:00Z"
std::string formatUtcTime(std::int64_t seconds);
// Now, to the millisecond: "2027-01-31T10:00:00.123Z" (sorts and compares as text).
std::string utcNowMillis();

}  // namespace tahua
