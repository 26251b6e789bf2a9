#include "admin/cache_admin.h"

#include <boost/json.hpp>

#include "admin/admin_error.h"
#include "admin/store_writes.h"
#include "cache/response_cache.h"
#include "core/json_text.h"
#include "filters/cache/cache_key.h"
#include "http/query.h"

namespace tahua {
namespace bj = boost::json;

boost::asio::awaitable<std::optional<AdminReply>> handleCacheAdmin(ResponseCache& cache, std::string_view method,
                                                                   std::string_view rest, std::string_view query) {
  if (rest != "cache") co_return std::nullopt;
  if (method == "GET") {
    const ResponseCache::Stats st = cache.stats();
    const std::uint64_t lookups = st.hits + st.semantic_hits + st.misses;
    const SemanticIndex::Stats sem = cache.semantic().stats();
    bj::object o{{"entries", st.entries},
                 {"bytes", st.bytes},
                 {"evictions", st.evictions},
                 {"expired", st.expired},
                 {"purged", st.purged},
                 {"shared", cache.shared()},
                 {"hits", st.hits},
                 {"semantic_hits", st.semantic_hits},
                 {"misses", st.misses},
                 {"hit_rate", lookups ? static_cast<double>(st.hits + st.semantic_hits) / static_cast<double>(lookups) : 0.0},
                 {"semantic", bj::object{{"entries", sem.entries}, {"indexes", sem.indexes}, {"bytes", sem.bytes}, {"dropped", sem.dropped}}}};
    co_return AdminReply{200, jsonText(o)};
  }
  if (method != "DELETE") co_return adminError(405, "method_not_allowed", "Use GET or DELETE.");
  const std::string tenant(queryParam(query, "tenant").value_or(""));
  const std::string key(queryParam(query, "key").value_or(""));
  const std::string model(queryParam(query, "model").value_or(""));
  const std::size_t local = cache.purge(tenant, key, model);
  // The semantic layer's vectors of the same tenants, keys and models go with them.
  // (Index names are the keys' prefixes: "tahua:cache:t<hash>:k<hash>:m<hash>".)
  auto part = [](const char* tag, const std::string& name) { return name.empty() ? std::string() : tag + cacheNameHash(name); };
  cache.semantic().purge(part(":t", tenant), part(":k", key), part(":m", model));
  bj::object o{{"purged_local", local}};
  if (cache.shared()) {
    const std::string pattern = cacheKeyPattern(tenant, key, model);
    auto op = admin_store::await<long long>([&cache, pattern](std::function<void(long long)> done) {
      cache.remotePurge(pattern, std::move(done));
    });
    const long long shared = co_await std::move(op);
    if (shared < 0) co_return adminError(503, "cache_unavailable", "The shared cache (cache.redis) did not answer; this replica's copies were purged.");
    o["purged_shared"] = shared;
  }
  co_return AdminReply{200, jsonText(o)};
}

}  // namespace tahua
