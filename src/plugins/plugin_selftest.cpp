#include "config/plugin_config.h"

#include <boost/json.hpp>

#include <chrono>
#include <lua.hpp>

#include "core/ascii.h"
#include "core/json_read.h"
#include "plugins/plugin_host.h"
#include "request/request_context.h"
#include "telemetry/metrics.h"

namespace tahua {
namespace {

class FixtureHeaders final : public HeaderView {
 public:
  explicit FixtureHeaders(const std::vector<std::pair<std::string, std::string>>& headers) : headers_(headers) {}
  std::string_view get(std::string_view name) const override {
    for (const auto& [k, v] : headers_)
      if (iequals(k, name)) return v;
    return {};
  }

 private:
  const std::vector<std::pair<std::string, std::string>>& headers_;
};

Endpoint endpointOf(std::string_view path) {
  if (path == "/v1/completions") return Endpoint::Completions;
  if (path == "/v1/embeddings") return Endpoint::Embeddings;
  if (path == "/v1/responses") return Endpoint::Responses;
  if (path == "/v1/messages") return Endpoint::Messages;
  if (path == "/v1/messages/count_tokens") return Endpoint::CountTokens;
  return Endpoint::ChatCompletions;
}

// JSON text in one canonical spelling (what a field's value is compared as).
std::string canonical(std::string_view text) {
  boost::system::error_code ec;
  const boost::json::value v = readJson(text, ec);
  return ec ? std::string(text) : boost::json::serialize(v);
}

// One fixture: "" when it passes, else what differed.
std::string runTest(PluginInstance& instance, const PluginConfig& plugin, const PluginTest& t) {
  ModelConfig model;
  model.name = t.model;
  TenantConfig tenant;
  tenant.name = t.tenant;
  ApiKeyConfig key;
  key.name = t.key;
  FixtureHeaders headers(t.headers);
  RequestContext ctx;
  ctx.request_id = "selftest";
  ctx.endpoint = endpointOf(t.path);
  ctx.method = "POST";
  ctx.path = t.path;
  ctx.headers = &headers;
  ctx.body = !t.body.empty() ? t.body
                             : boost::json::serialize(boost::json::object{
                                   {"model", t.model}, {"messages", boost::json::array{boost::json::object{{"role", "user"}, {"content", "hi"}}}}});
  ctx.model = &model;
  if (!t.tenant.empty()) ctx.principal.tenant = &tenant;
  if (!t.key.empty()) ctx.principal.key = &key;
  ctx.start = std::chrono::steady_clock::now();

  if (!(plugin.phases & t.phase)) return std::string("the test exercises ") + pluginPhaseFunction(t.phase) + ", which the code does not define";
  std::shared_ptr<PluginRuntime> rt = instance.runtime();
  if (!rt) return "the plugin could not be instantiated";
  PluginEffects effects;
  PluginBody body;
  body.reset(ctx.body);
  PluginCallView view;
  view.begin(&ctx, t.phase, &effects);
  if (t.phase == kPluginRequest) {
    view.body = &body;
  } else {  // on_auth runs before routing and before anyone is known
    ctx.model = nullptr;
    ctx.principal = Principal{};
  }
  LuaCall call;
  int ref = -2;
  lua_State* thread = instance.prepare(*rt, call, view);
  instance.pushView(*rt, thread, view, ref);
  // Self-tests have no store: tahua.kv.get finds nothing, and writes go nowhere.
  const auto deadline = std::chrono::steady_clock::now() + std::max<std::chrono::microseconds>(10 * plugin.cpu, std::chrono::seconds(1));
  LuaStep step = instance.run(*rt, call, view);
  while (step == LuaStep::Yielded || step == LuaStep::Waiting)
    step = step == LuaStep::Yielded ? instance.runToEnd(*rt, call, view, deadline) : instance.resumeWith(*rt, call, view, nullptr, {});
  const std::string message = call.message;
  const PluginOutcome outcome = instance.finish(*rt, call, view, ref);
  rt->vm.release(call);
  if (outcome != PluginOutcome::Ok)
    return std::string(pluginPhaseFunction(t.phase)) + " failed (" + std::string(pluginOutcomeName(outcome)) +
           (message.empty() ? ")" : "): " + message);

  if (t.phase == kPluginAuth && !effects.denied) {
    if (effects.authenticated != t.expect_authenticate)
      return t.expect_authenticate ? "expected authenticate(); the request passed to the next link"
                                   : "expected a pass; the plugin authenticated tenant " + effects.auth_tenant;
    if (!t.expect_tenant.empty() && effects.auth_tenant != t.expect_tenant)
      return "expected tenant " + t.expect_tenant + ", got " + effects.auth_tenant;
    if (t.expect_authenticate && effects.auth_key != t.expect_key)
      return "expected key " + (t.expect_key.empty() ? std::string("(none)") : t.expect_key) + ", got " +
             (effects.auth_key.empty() ? std::string("(none)") : effects.auth_key);
  }

  if (effects.denied != t.expect_deny)
    return t.expect_deny ? "expected a refusal; the request went on"
                         : "the request was refused (" + std::to_string(effects.deny_status) + " " + effects.deny_message + ")";
  if (t.expect_deny) {
    if (t.expect_status && effects.deny_status != t.expect_status)
      return "expected status " + std::to_string(t.expect_status) + ", got " + std::to_string(effects.deny_status);
    const std::string code = effects.deny_code.empty() ? "plugin_denied" : effects.deny_code;
    if (!t.expect_code.empty() && code != t.expect_code) return "expected code " + t.expect_code + ", got " + code;
  }
  for (const auto& [name, value] : t.expect_headers) {
    bool found = false;
    for (const auto& [k, v] : effects.set_headers) found = found || (iequals(k, name) && v == value);
    if (!found) return "expected the upstream header " + name + ": " + value;
  }
  body.apply(effects);
  for (const auto& [path, value] : t.expect_fields) {
    const boost::json::value* got = body.find(path);
    const std::string text = got ? boost::json::serialize(*got) : "(absent)";
    if (text != canonical(value)) return "expected body field " + path + " = " + canonical(value) + ", got " + text;
  }
  return "";
}

}  // namespace

std::string runPluginTests(const PluginConfig& plugin) {
  if (plugin.tests.empty()) return "";
  WorkerMetrics metrics;  // the calls' counts go nowhere
  PluginInstance instance(plugin, metrics);
  for (const PluginTest& t : plugin.tests) {
    std::string failure;
    try {
      failure = runTest(instance, plugin, t);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (!failure.empty()) return "test '" + t.name + "' failed: " + failure;
  }
  return "";
}

}  // namespace tahua
