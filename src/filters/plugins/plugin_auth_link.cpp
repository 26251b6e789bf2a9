#include "filters/plugins/plugin_auth_link.h"

#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "filters/plugins/plugin_set.h"
#include "tenants/key_table.h"

namespace tahua {
namespace {


// One on_auth call's data; pooled by the link (a paused call holds its own).
struct AuthCall {
  PluginInstance* in = nullptr;  // the plugin, or its canary version
  PluginEffects effects;
  PluginCallView view;
  std::shared_ptr<PluginRuntime> rt;
  LuaCall call;
  int handle_ref = kLuaNoRef;
};

class PluginAuthLink final : public AuthLink {
 public:
  PluginAuthLink(std::shared_ptr<PluginSet> set, std::string_view id, const KeyTable& keys)
      : set_(std::move(set)), id_(id), keys_(keys), in_(set_->find(id)) {
    if (in_ && !(in_->config().phases & kPluginAuth)) in_ = nullptr;
    if (!in_)
      log::error("auth chain names a plugin that is not loaded or defines no on_auth: the link passes every request to the next",
                 {{"plugin", id_}});
  }
  std::string_view name() const override { return "plugin"; }

  AuthOutcome check(RequestContext& ctx, Principal& out, AuthContinuation& then) override {
    if (!in_) return AuthOutcome::Pass;
    PluginInstance* chosen = set_->versionFor(in_, ctx);
    if (!(chosen->config().phases & kPluginAuth)) chosen = in_;  // a canary without on_auth: the stable one decides
    PluginInstance& in = *chosen;
    if (in.breakerOpen(std::chrono::steady_clock::now())) {
      in.countSkipped(kPluginAuth);
      return failed(ctx, in);
    }
    std::shared_ptr<PluginRuntime> rt = in.runtime();
    if (!rt) {
      in.countUnavailable(kPluginAuth);
      return failed(ctx, in);
    }
    std::shared_ptr<AuthCall> c = take();
    c->in = &in;
    c->effects.clear();
    c->view.begin(&ctx, kPluginAuth, &c->effects);
    c->rt = std::move(rt);
    lua_State* t = in.prepare(*c->rt, c->call, c->view);
    in.pushView(*c->rt, t, c->view, c->handle_ref);
    if (const LuaStep step = in.run(*c->rt, c->call, c->view); step == LuaStep::Yielded || step == LuaStep::Waiting) {
      // The call holds its data (`c`) until it ends, whatever happens to the request.
      set_->continueCall(in, c->rt, c->call, c->view, step, [this, c, &ctx, &then] { then.linkDone(ctx, end(*c, ctx, ctx.principal, c)); });
      return AuthOutcome::Pending;
    }
    return end(*c, ctx, out, c);
  }

 private:
  std::shared_ptr<AuthCall> take() {
    if (spare_.empty()) return std::make_shared<AuthCall>();
    std::shared_ptr<AuthCall> c = std::move(spare_.back());
    spare_.pop_back();
    return c;
  }

  AuthOutcome end(AuthCall& c, RequestContext& ctx, Principal& out, const std::shared_ptr<AuthCall>& self) {
    PluginInstance& in = *c.in;
    const PluginOutcome o = in.finish(*c.rt, c.call, c.view, c.handle_ref);
    c.handle_ref = kLuaNoRef;
    c.rt->vm.release(c.call);
    c.rt.reset();
    const AuthOutcome answer = o != PluginOutcome::Ok ? failed(ctx, in) : decide(c.effects, ctx, out, in);
    c.effects.clear();
    if (spare_.size() < 16) spare_.push_back(self);
    return answer;
  }

  AuthOutcome decide(PluginEffects& e, RequestContext& ctx, Principal& out, const PluginInstance& in) {
    if (e.denied) {
      Error err{ErrorKind::PluginDenied, std::move(e.deny_message)};
      err.plugin_status = e.deny_status;
      err.plugin_code = std::move(e.deny_code);
      ctx.fail(std::move(err));
      return AuthOutcome::Refused;
    }
    if (!e.authenticated) return AuthOutcome::Pass;
    const TenantConfig* tenant = keys_.tenant(e.auth_tenant);
    const ApiKeyConfig* key = e.auth_key.empty() ? nullptr : keys_.keyNamed(e.auth_key);
    const char* wrong = !tenant                                     ? "authenticate named a tenant that does not exist"
                        : !e.auth_key.empty() && !key               ? "authenticate named a key that does not exist"
                        : key && key->tenant != tenant->name        ? "authenticate named a key of another tenant"
                        : key && key->expires_at != 0 &&
                                  static_cast<std::int64_t>(std::time(nullptr)) >= key->expires_at
                                                                    ? "authenticate named a key that has expired"
                                                                    : nullptr;
    if (wrong) {
      log::warn(wrong, {{"plugin", in.config().id}, {"request_id", ctx.request_id}, {"tenant", e.auth_tenant}, {"key", e.auth_key}});
      return failed(ctx, in);
    }
    out.tenant = tenant;
    out.key = key;
    return AuthOutcome::Authenticated;
  }

  static AuthOutcome failed(RequestContext& ctx, const PluginInstance& in) {
    if (!in.config().fail_closed) return AuthOutcome::Pass;
    ctx.fail(Error{ErrorKind::PluginFailed, "The request could not be authenticated: plugin " + in.config().id + " failed."});
    return AuthOutcome::Refused;
  }

  std::shared_ptr<PluginSet> set_;
  std::string id_;
  const KeyTable& keys_;
  PluginInstance* in_;
  std::vector<std::shared_ptr<AuthCall>> spare_;
};

}  // namespace

std::unique_ptr<AuthLink> makePluginAuthLink(std::shared_ptr<PluginSet> set, std::string_view id, const KeyTable& keys) {
  return std::make_unique<PluginAuthLink>(std::move(set), id, keys);
}

}  // namespace tahua
