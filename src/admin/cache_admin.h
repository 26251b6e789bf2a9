// GET /admin/v1/cache (this replica's in-process layer: entries, bytes, evictions; hit
// rates are in /metrics) and DELETE /admin/v1/cache?tenant=&key=&model= (purge: every
// filter given must match; none purges everything): this replica's copies and the shared
// layer's entries. Other replicas' in-process copies expire within cache.local_ttl.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string_view>

#include "server/session_host.h"

namespace tahua {

class ResponseCache;

boost::asio::awaitable<std::optional<AdminReply>> handleCacheAdmin(ResponseCache& cache, std::string_view method,
                                                                   std::string_view rest, std::string_view query);

}  // namespace tahua
