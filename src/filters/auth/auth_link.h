// One link of an authentication chain. The auth filter runs the links of the chain that
// matches a request, in order: a link establishes who is calling (Authenticated, with
// `out` set), refuses the request (Refused, with ctx.fail), or leaves the decision to
// the next link (Pass). A request that every link passed is refused with 401. The
// built-in key check and the anonymous identity are links; an auth plugin (the plugins
// issue) joins a chain as another link, for the routes or customers that need it.
#pragma once

#include <memory>
#include <string_view>

#include "request/request_context.h"

namespace tahua {

class KeyTable;

enum class AuthOutcome { Authenticated, Refused, Pass };

class AuthLink {
 public:
  virtual ~AuthLink() = default;
  virtual std::string_view name() const = 0;
  // Synchronous: links answer from the worker's own tables. (A plugin link that must
  // wait will pause through the filter's resumer; that arrives with plugins.)
  virtual AuthOutcome check(RequestContext& ctx, Principal& out) const = 0;
};

// `Authorization: Bearer <key>`, `x-api-key: <key>` (Anthropic's SDK) or `api-key: <key>`
// (Azure's), looked up by SHA-256 in `keys`. No key: Pass (so a later link may decide).
std::unique_ptr<AuthLink> makeApiKeyLink(const KeyTable& keys);
// Every request that reaches it is `tenant`'s (internal paths, trusted networks).
std::unique_ptr<AuthLink> makeAnonymousLink(const TenantConfig& tenant);

// The key a request carries, from the headers above; empty when none.
std::string_view presentedKey(const HeaderView& headers);

}  // namespace tahua
