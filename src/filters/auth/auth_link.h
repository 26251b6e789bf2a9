// One link of an authentication chain. The auth filter runs the links of the chain that
// matches a request, in order: a link establishes who is calling (Authenticated, with
// `out` set), refuses the request (Refused, with ctx.fail), or leaves the decision to
// the next link (Pass). A request that every link passed is refused with 401. The
// built-in key check and the anonymous identity are links; an auth plugin
// ({type: plugin, id}) is another, for the routes or customers that need it. A link
// that must wait (a plugin call that outlives its slice) answers Pending and gives its
// answer later through the AuthContinuation, once, on the worker's thread.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "request/request_context.h"

namespace tahua {

class KeyTable;

enum class AuthOutcome { Authenticated, Refused, Pass, Pending };

// Where a link that answered Pending gives its answer (Authenticated with ctx.principal
// set, Refused with ctx.error, or Pass).
class AuthContinuation {
 public:
  virtual void linkDone(RequestContext& ctx, AuthOutcome outcome) = 0;

 protected:
  ~AuthContinuation() = default;
};

class AuthLink {
 public:
  virtual ~AuthLink() = default;
  virtual std::string_view name() const = 0;
  virtual AuthOutcome check(RequestContext& ctx, Principal& out, AuthContinuation& then) = 0;
};

// Makes the link `{type: plugin, id}` of a chain (see filters/plugins/plugin_auth_link.h);
// given to the auth filter by the worker when plugins are configured.
using PluginLinkFactory = std::function<std::unique_ptr<AuthLink>(std::string_view id, const KeyTable& keys)>;

// `Authorization: Bearer <key>`, `x-api-key: <key>` (Anthropic's SDK) or `api-key: <key>`
// (Azure's), looked up by SHA-256 in `keys` (a key seen before through the table's cache
// of verified keys, without the SHA-256). No key: Pass (so a later link may decide).
std::unique_ptr<AuthLink> makeApiKeyLink(const KeyTable& keys);
// Every request that reaches it is `tenant`'s (internal paths, trusted networks).
std::unique_ptr<AuthLink> makeAnonymousLink(const TenantConfig& tenant);

// The key a request carries, from the headers above; empty when none.
std::string_view presentedKey(const HeaderView& headers);

}  // namespace tahua
