#pragma once

#include <memory>
#include <string_view>

#include "filters/auth/auth_link.h"

namespace tahua {

class PluginSet;

// The auth link `{type: plugin, id}`: the plugin's on_auth(req) sees the request's
// method, path and headers (no body yet) and
//   - req:authenticate(tenant [, key]): the request is the tenant's (and that key's, one
//     of the tenant's keys, whose models and limits then apply);
//   - req:deny(status, message [, code]): refused, in the client's API shape;
//   - neither: the next link decides.
// A call that fails (error, budget, breaker open, a tenant or key that does not exist)
// passes to the next link when the plugin fails open (so a broken plugin admits nobody by
// itself) and is refused with 503 plugin_failed when it fails closed. A call that
// outlives its first slice finishes on the plugin thread and the request waits.
std::unique_ptr<AuthLink> makePluginAuthLink(std::shared_ptr<PluginSet> set, std::string_view id, const KeyTable& keys);

}  // namespace tahua
