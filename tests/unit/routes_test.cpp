// Declarative routes: the loader's validation of `routes:` (every error names
// file:line:col and the field path) and the router filter's choice (first match in config
// order over exact-model and glob / model-agnostic routes; model, path, header and query
// matchers; cost-aware `when` conditions; `override`), driven through makeRouterFilter()
// with a RequestContext exactly as the session does (onRequestBody, onUpstreamSelect).
#include "filters/router/router_filter.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "request/request_context.h"
#include "tokens/token_estimator.h"

namespace tahua {
namespace routes_test {  // named, not anonymous: eight test files compile as one unit

// Models every test config has (all on one mock provider). None is named like a model a
// test asks for through a route unless the test is about configured models.
const char* kBase = R"(listeners:
  - port: 0
providers:
  - name: mock
    type: mock
models:
  - name: small
    provider: mock
  - name: large
    provider: mock
  - name: tools
    provider: mock
  - name: model-a
    provider: mock
  - name: model-b
    provider: mock
)";
constexpr int kBaseLines = 16;  // lines of kBase; `routes:` is on line kBaseLines + 1

ConfigLoadResult loadRoutes(const std::string& routes) {
  return loadConfigString(std::string(kBase) + "routes:\n" + routes, "r.yaml");
}

ConfigPtr mustLoad(const std::string& routes) {
  auto r = loadRoutes(routes);
  EXPECT_TRUE(r.config) << r.error << "\n--- routes:\n" << routes;
  return r.config;
}

std::string loadError(const std::string& routes) {
  auto r = loadRoutes(routes);
  EXPECT_FALSE(r.config) << "accepted:\n" << routes;
  return r.error;
}

// "r.yaml:LINE:COL: FIELD: " at the start of `error`, LINE counted within `routes`
// (1 = the first line after `routes:`).
void expectDiagnostic(const std::string& error, int routes_line, const std::string& field,
                      const std::string& message_part = "") {
  const std::string prefix = "r.yaml:" + std::to_string(kBaseLines + 1 + routes_line) + ":";
  EXPECT_EQ(error.rfind(prefix, 0), 0u) << "want prefix " << prefix << " in: " << error;
  const std::string want_field = ": " + field + ": ";
  EXPECT_NE(error.find(want_field), std::string::npos) << "want field " << field << " in: " << error;
  EXPECT_TRUE(std::regex_search(error, std::regex(R"(^r\.yaml:\d+:\d+: )"))) << error;
  if (!message_part.empty()) {
    EXPECT_NE(error.find(message_part), std::string::npos) << error;
  }
}

// Case-insensitive request headers, like the session's view over Beast's fields.
class Headers final : public HeaderView {
 public:
  Headers(std::initializer_list<std::pair<std::string, std::string>> h = {}) : h_(h) {}
  std::string_view get(std::string_view name) const override {
    for (const auto& [k, v] : h_)
      if (k.size() == name.size() &&
          std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
        return v;
    return {};
  }

 private:
  std::vector<std::pair<std::string, std::string>> h_;
};

struct Request {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string path = "/v1/chat/completions";
  std::string query;
  Headers headers;
  std::string body;
};

struct Outcome {
  std::string model;  // the chosen model's name, "" when none
  std::string route;  // ctx.route_name
  std::optional<Error> error;
};

Outcome routeOn(const ConfigPtr& cfg, Request req) {
  Outcome out;
  if (!cfg) {
    ADD_FAILURE() << "no config";
    return out;
  }
  auto filter = makeRouterFilter();
  RequestContext ctx;
  ctx.config = cfg;
  ctx.endpoint = req.endpoint;
  ctx.method = "POST";
  ctx.path = req.path;
  ctx.query = req.query;
  ctx.headers = &req.headers;
  ctx.body = req.body;
  if (filter->onRequestBody(ctx) == FilterStatus::Continue) filter->onUpstreamSelect(ctx);
  if (ctx.model) out.model = ctx.model->name;
  out.route = std::string(ctx.route_name);
  out.error = ctx.error;
  return out;
}

std::string chat(const std::string& model, const std::string& content = "hello") {
  return R"({"model":")" + model + R"(","messages":[{"role":"user","content":")" + content + R"("}]})";
}

Request chatReq(const std::string& model, Headers h = {}, std::string query = "") {
  Request r;
  r.body = chat(model);
  r.headers = std::move(h);
  r.query = std::move(query);
  return r;
}

Outcome routeChat(const ConfigPtr& cfg, const std::string& model, Headers h = {}, std::string query = "") {
  return routeOn(cfg, chatReq(model, std::move(h), std::move(query)));
}

std::string words(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "lorem ipsum dolor sit amet ";
  return s;
}

// ---------------------------------------------------------------------------------------
// Config errors

TEST(RoutesConfig, ValidRoutesLoadAndAreIndexed) {
  auto cfg = mustLoad(R"(  - name: by-glob
    match: {model: "gpt-*"}
    target: model-a
  - name: by-name
    match: {model: [gpt-4o, "o?-mini", o3]}
    target: model-b
  - match: {headers: {X-Team: search}}
    target: small
)");
  ASSERT_TRUE(cfg);
  ASSERT_EQ(cfg->routes.size(), 3u);
  EXPECT_EQ(cfg->routes[1].models, (std::vector<std::string>{"gpt-4o", "o3"}));
  EXPECT_EQ(cfg->routes[1].model_globs, (std::vector<std::string>{"o?-mini"}));
  EXPECT_EQ(cfg->routes[2].name, "route-2");  // the default name
  EXPECT_EQ(cfg->routes[2].headers.at(0).first, "x-team");  // names kept lower-case
  EXPECT_EQ(cfg->routes_any_model, (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(cfg->routes_by_model.at("gpt-4o"), (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(cfg->routes[1].target, "model-b");
  EXPECT_EQ(cfg->models[cfg->routes[1].target_index].name, "model-b");
}

TEST(RoutesConfig, UnknownTarget) {
  expectDiagnostic(loadError(R"(  - name: r
    match: {model: auto}
    target: nope
)"),
                   3, "routes[0].target", "unknown model \"nope\"");
}

TEST(RoutesConfig, PolicyRefLinksTheRouteToTheRateLimitPolicy) {
  // The policy is declared after the routes: refs are linked once everything is loaded.
  auto cfg = mustLoad(R"(  - name: cheap
    match: {model: auto}
    target: small
    policyRef: cheap-cap
rate_limits:
  policies:
    - name: cheap-cap
      per: all
      requests_per_minute: 5
    - name: by-route
      match: {route: [other]}
      requests_per_minute: 9
)");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->routes[0].policy_ref, "cheap-cap");
  EXPECT_EQ(cfg->rate_limits.policies[0].routes, std::vector<std::string>{"cheap"});
  EXPECT_EQ(cfg->rate_limits.policies[1].routes, std::vector<std::string>{"other"});
  expectDiagnostic(loadError("  - name: r\n    target: small\n    policyRef: nope\n"), 3, "routes[0].policyRef",
                   "unknown RateLimitPolicy \"nope\"");
}

TEST(RoutesConfig, MissingOrEmptyTarget) {
  expectDiagnostic(loadError("  - name: r\n    match: {model: auto}\n"), 1, "routes[0].target", "required");
  expectDiagnostic(loadError("  - name: r\n    target: \"\"\n"), 2, "routes[0].target", "must not be empty");
}

TEST(RoutesConfig, DuplicateNames) {
  expectDiagnostic(loadError(R"(  - name: same
    target: small
  - name: other
    target: small
  - name: same
    target: large
)"),
                   5, "routes[2].name", "duplicate route name \"same\"");
}

// A default name ("route-N") colliding with an explicit one is a duplicate too, and the
// message must still be a proper file:line:col diagnostic for routes[1].name.
// Gateway bug (kept failing): the loader calls fail(y["name"], ...) on the absent node and
// yaml-cpp's InvalidNode escapes: "r.yaml: (yaml): invalid node; first invalid key: "name"".
TEST(RoutesConfig, DuplicateOfADefaultName) {
  std::string err = loadError(R"(  - name: route-1
    target: small
  - target: large
)");
  EXPECT_NE(err.find("routes[1].name"), std::string::npos) << err;
  EXPECT_NE(err.find("duplicate route name \"route-1\""), std::string::npos) << err;
  EXPECT_EQ(err.find("(yaml)"), std::string::npos) << "an internal yaml-cpp error leaked: " << err;
}

TEST(RoutesConfig, ConfiguredModelWithoutOverride) {
  expectDiagnostic(loadError(R"(  - name: r
    match:
      model: small
    target: large
)"),
                   3, "routes[0].match.model",
                   "\"small\" is a configured model, which clients reach directly, so this route would never apply "
                   "to it; add override: true to the route to send its requests to \"large\" instead");
  // In a list too, wherever it is.
  std::string err = loadError(R"(  - name: r
    match:
      model: [auto, large]
    target: small
)");
  EXPECT_NE(err.find("routes[0].match.model"), std::string::npos) << err;
  EXPECT_NE(err.find("\"large\" is a configured model"), std::string::npos) << err;
  // With override it is fine, whatever the key order in the mapping.
  EXPECT_TRUE(mustLoad(R"(  - name: r
    match: {model: small}
    target: large
    override: true
)"));
  EXPECT_TRUE(mustLoad(R"(  - override: true
    match: {model: [small]}
    target: large
)"));
  // A glob that happens to cover configured models is not an error.
  EXPECT_TRUE(mustLoad("  - match: {model: \"model-*\"}\n    target: small\n"));
}

TEST(RoutesConfig, BadHours) {
  for (const char* bad : {"25:00-08:00", "08:00-08:00", "08:60-09:00", "8am-5pm", "08:00-18:00x", "08:00", "24:01-02:00",
                          "08:00-18:00-20:00", ""}) {
    SCOPED_TRACE(bad);
    expectDiagnostic(loadError(std::string("  - name: r\n    when:\n      hours: \"") + bad + "\"\n    target: small\n"), 3,
                     "routes[0].when.hours");
  }
  // Not a scalar.
  expectDiagnostic(loadError("  - name: r\n    when:\n      hours: [1, 2]\n    target: small\n"), 3, "routes[0].when.hours");
  for (const char* good : {"08:00-18:00", "22:00-06:00", "00:00-24:00", "23:59-00:00"}) {
    SCOPED_TRACE(good);
    EXPECT_TRUE(mustLoad(std::string("  - name: r\n    when:\n      hours: \"") + good + "\"\n    target: small\n"));
  }
}

// A negative hour is no time of day: it must be rejected, not turn the route's time
// condition off (from_minute < 0 means "no hours" to the router).
// Gateway bug (kept failing): sscanf("%2d") reads "-1" and only upper bounds are checked.
TEST(RoutesConfig, NegativeHoursAreRejected) {
  for (const char* bad : {"-1:00-08:00", "08:00--1:00", "08:-5-09:00"}) {
    SCOPED_TRACE(bad);
    auto r = loadRoutes(std::string("  - name: r\n    when:\n      hours: \"") + bad + "\"\n    target: small\n");
    if (r.config) {
      ADD_FAILURE() << "accepted hours \"" << bad << "\": from_minute=" << r.config->routes[0].from_minute
                    << " to_minute=" << r.config->routes[0].to_minute;
    } else {
      expectDiagnostic(r.error, 3, "routes[0].when.hours");
    }
  }
}

TEST(RoutesConfig, BadPath) {
  expectDiagnostic(loadError("  - name: r\n    match:\n      path: v1/chat/completions\n    target: small\n"), 3,
                   "routes[0].match.path", "must start with /");
  expectDiagnostic(loadError("  - name: r\n    match:\n      path: \"\"\n    target: small\n"), 3, "routes[0].match.path",
                   "must not be empty");
}

TEST(RoutesConfig, OtherFieldErrorsNameTheField) {
  // Unknown keys at each level.
  expectDiagnostic(loadError("  - name: r\n    matc: {model: auto}\n    target: small\n"), 2, "routes[0].matc", "unknown field");
  expectDiagnostic(loadError("  - name: r\n    match:\n      modle: auto\n    target: small\n"), 3, "routes[0].match.modle",
                   "unknown field");
  expectDiagnostic(loadError("  - name: r\n    when:\n      max_tokens: 5\n    target: small\n"), 3,
                   "routes[0].when.max_tokens", "unknown field");
  // Wrong types.
  expectDiagnostic(loadError("  - name: r\n    when:\n      has_tools: maybe\n    target: small\n"), 3,
                   "routes[0].when.has_tools", "true or false");
  expectDiagnostic(loadError("  - name: r\n    when:\n      max_prompt_tokens: -5\n    target: small\n"), 3,
                   "routes[0].when.max_prompt_tokens");
  expectDiagnostic(loadError("  - name: r\n    override: yes please\n    target: small\n"), 2, "routes[0].override");
  expectDiagnostic(loadError("  - name: r\n    match:\n      headers: [x-team]\n    target: small\n"), 3,
                   "routes[0].match.headers", "mapping");
  expectDiagnostic(loadError("  - name: r\n    match:\n      model: [auto, \"\"]\n    target: small\n"), 3,
                   "routes[0].match.model[1]", "must not be empty");
  // `routes` itself must be a list.
  auto r = loadConfigString(std::string(kBase) + "routes:\n  name: r\n", "r.yaml");
  ASSERT_FALSE(r.config);
  EXPECT_NE(r.error.find(": routes: expected a list"), std::string::npos) << r.error;
  // The second route's errors say routes[1].
  expectDiagnostic(loadError("  - target: small\n  - target: nope\n"), 2, "routes[1].target");
}

// ---------------------------------------------------------------------------------------
// Matching order

TEST(RoutesMatch, FirstMatchInConfigOrderAcrossGlobAndExact) {
  auto glob_first = mustLoad(R"(  - name: glob
    match: {model: "gpt-*"}
    target: model-a
  - name: exact
    match: {model: gpt-4o}
    target: model-b
)");
  auto o = routeChat(glob_first, "gpt-4o");
  EXPECT_EQ(o.route, "glob");
  EXPECT_EQ(o.model, "model-a");

  auto exact_first = mustLoad(R"(  - name: exact
    match: {model: gpt-4o}
    target: model-b
  - name: glob
    match: {model: "gpt-*"}
    target: model-a
)");
  o = routeChat(exact_first, "gpt-4o");
  EXPECT_EQ(o.route, "exact");
  EXPECT_EQ(o.model, "model-b");
  // Other names the glob covers still go to the glob.
  o = routeChat(exact_first, "gpt-4o-mini");
  EXPECT_EQ(o.route, "glob");
  EXPECT_EQ(o.model, "model-a");
}

TEST(RoutesMatch, InterleavedListsKeepConfigOrder) {
  // exact(not matching: header) - glob(header) - exact - agnostic - exact+glob in one route
  auto cfg = mustLoad(R"(  - name: e0
    match: {model: gpt-4o, headers: {x-tier: gold}}
    target: small
  - name: g1
    match: {model: "gpt-4?", headers: {x-tier: silver}}
    target: large
  - name: e2
    match: {model: [gpt-4o, gpt-4]}
    target: tools
  - name: any3
    target: model-a
  - name: both4
    match: {model: [claude-x, "claude-*"]}
    target: model-b
)");
  EXPECT_EQ(routeChat(cfg, "gpt-4o", {{"x-tier", "gold"}}).route, "e0");
  EXPECT_EQ(routeChat(cfg, "gpt-4o", {{"x-tier", "silver"}}).route, "g1");  // glob route 1 before exact route 2
  EXPECT_EQ(routeChat(cfg, "gpt-4x", {{"x-tier", "silver"}}).route, "g1");
  EXPECT_EQ(routeChat(cfg, "gpt-4x").route, "any3");
  EXPECT_EQ(routeChat(cfg, "gpt-4", {{"x-tier", "silver"}}).route, "e2");  // "gpt-4?" needs one more character
  EXPECT_EQ(routeChat(cfg, "gpt-4").route, "e2");
  EXPECT_EQ(routeChat(cfg, "gpt-4o").route, "e2");
  // The model-agnostic route comes before the exact+glob route: it wins.
  EXPECT_EQ(routeChat(cfg, "claude-x").route, "any3");
  EXPECT_EQ(routeChat(cfg, "claude-y").route, "any3");
}

TEST(RoutesMatch, RouteWithExactAndGlobInOneListIsCheckedOnce) {
  auto cfg = mustLoad(R"(  - name: both
    match: {model: [claude-x, "claude-*"], headers: {x-a: "1"}}
    target: model-b
  - name: exact-after
    match: {model: claude-x}
    target: model-a
  - name: glob-after
    match: {model: "claude-*"}
    target: small
)");
  EXPECT_EQ(routeChat(cfg, "claude-x", {{"x-a", "1"}}).route, "both");
  EXPECT_EQ(routeChat(cfg, "claude-x").route, "exact-after");
  EXPECT_EQ(routeChat(cfg, "claude-z", {{"x-a", "1"}}).route, "both");
  EXPECT_EQ(routeChat(cfg, "claude-z").route, "glob-after");
}

TEST(RoutesMatch, GlobSyntax) {
  auto cfg = mustLoad(R"(  - name: q
    match: {model: "claude-?-opus"}
    target: model-a
  - name: set
    match: {model: "o[13]-mini"}
    target: model-b
)");
  EXPECT_EQ(routeChat(cfg, "claude-3-opus").route, "q");
  EXPECT_EQ(routeChat(cfg, "claude-35-opus").route, "");
  EXPECT_EQ(routeChat(cfg, "o1-mini").route, "set");
  EXPECT_EQ(routeChat(cfg, "o3-mini").route, "set");
  EXPECT_EQ(routeChat(cfg, "o2-mini").route, "");
  // Model names with a '/' (e.g. "org/model") are matched by '*' too.
  auto slash = mustLoad("  - name: s\n    match: {model: \"meta/*\"}\n    target: small\n");
  EXPECT_EQ(routeChat(slash, "meta/llama-3").route, "s");
}

TEST(RoutesMatch, HeaderMatchers) {
  auto cfg = mustLoad(R"(  - name: search
    match: {headers: {X-Team: search}}
    target: model-a
  - name: two
    match: {headers: {x-a: "1", x-b: "2"}}
    target: model-b
  - name: present
    match: {headers: {x-debug: "*"}}
    target: tools
)");
  EXPECT_EQ(routeChat(cfg, "auto", {{"x-team", "search"}}).route, "search");
  EXPECT_EQ(routeChat(cfg, "auto", {{"X-TEAM", "search"}}).route, "search");  // names case-insensitive
  EXPECT_EQ(routeChat(cfg, "auto", {{"x-team", "Search"}}).route, "");        // values exact
  EXPECT_EQ(routeChat(cfg, "auto", {{"x-team", "search2"}}).route, "");
  EXPECT_EQ(routeChat(cfg, "auto", {{"x-a", "1"}}).route, "");  // all must match
  EXPECT_EQ(routeChat(cfg, "auto", {{"x-a", "1"}, {"x-b", "2"}}).route, "two");
  EXPECT_EQ(routeChat(cfg, "auto", {{"x-debug", "anything"}}).route, "present");
  EXPECT_EQ(routeChat(cfg, "auto", {{"x-debug", "*"}}).route, "present");
  EXPECT_EQ(routeChat(cfg, "auto").route, "");
  EXPECT_EQ(routeChat(cfg, "auto").error->kind, ErrorKind::ModelNotFound);
  // No header view at all (nothing to match against): no header route matches.
  Request r = chatReq("auto");
  auto filter = makeRouterFilter();
  RequestContext ctx;
  ctx.config = cfg;
  ctx.endpoint = Endpoint::ChatCompletions;
  ctx.path = "/v1/chat/completions";
  ctx.body = r.body;
  filter->onRequestBody(ctx);
  filter->onUpstreamSelect(ctx);
  EXPECT_EQ(ctx.route_name, "");
  EXPECT_EQ(ctx.model, nullptr);
}

TEST(RoutesMatch, QueryMatchers) {
  auto cfg = mustLoad(R"(  - name: premium
    match: {query: {tier: premium}}
    target: model-a
  - name: empty-value
    match: {query: {flag: ""}}
    target: model-b
)");
  EXPECT_EQ(routeChat(cfg, "auto", {}, "tier=premium").route, "premium");
  EXPECT_EQ(routeChat(cfg, "auto", {}, "a=1&tier=premium&b=2").route, "premium");
  EXPECT_EQ(routeChat(cfg, "auto", {}, "tier=premium2").route, "");
  EXPECT_EQ(routeChat(cfg, "auto", {}, "xtier=premium").route, "");
  EXPECT_EQ(routeChat(cfg, "auto", {}, "tier=").route, "");
  EXPECT_EQ(routeChat(cfg, "auto", {}, "").route, "");
  EXPECT_EQ(routeChat(cfg, "auto", {}, "flag").route, "empty-value");
  EXPECT_EQ(routeChat(cfg, "auto", {}, "flag=").route, "empty-value");
  EXPECT_EQ(routeChat(cfg, "auto", {}, "flags=").route, "");
}

TEST(RoutesMatch, PathMatcher) {
  auto cfg = mustLoad(R"(  - name: messages
    match: {path: /v1/messages}
    target: model-a
  - name: chat
    match: {path: /v1/chat/completions, model: "claude-*"}
    target: model-b
)");
  Request m;
  m.endpoint = Endpoint::Messages;
  m.path = "/v1/messages";
  m.body = R"({"model":"claude-3","max_tokens":10,"messages":[{"role":"user","content":"hi"}]})";
  auto o = routeOn(cfg, m);
  EXPECT_EQ(o.route, "messages");
  EXPECT_EQ(o.model, "model-a");
  o = routeChat(cfg, "claude-3");
  EXPECT_EQ(o.route, "chat");
  EXPECT_EQ(o.model, "model-b");
  EXPECT_EQ(routeChat(cfg, "gpt-4o").route, "");
  // The path is exact: no prefix match.
  auto prefix = mustLoad("  - name: p\n    match: {path: /v1}\n    target: small\n");
  EXPECT_EQ(routeChat(prefix, "x").route, "");
}

// ---------------------------------------------------------------------------------------
// Configured model names and override

TEST(RoutesOverride, ExplicitConfiguredModelWinsWithoutOverride) {
  auto cfg = mustLoad(R"(  - name: everything
    target: large
  - name: teams
    match: {headers: {x-team: search}}
    target: model-a
)");
  auto o = routeChat(cfg, "small", {{"x-team", "search"}});
  EXPECT_EQ(o.model, "small");
  EXPECT_EQ(o.route, "");
  EXPECT_FALSE(o.error);
  // An unconfigured name takes the first route.
  o = routeChat(cfg, "whatever", {{"x-team", "search"}});
  EXPECT_EQ(o.model, "large");
  EXPECT_EQ(o.route, "everything");
}

TEST(RoutesOverride, OverrideReroutesAConfiguredModel) {
  auto cfg = mustLoad(R"(  - name: plain
    match: {headers: {x-team: search}}
    target: model-a
  - name: force-small-to-large
    match: {model: small, headers: {x-big: "yes"}}
    target: large
    override: true
  - name: force-all-by-team
    match: {headers: {x-team: search}}
    target: model-b
    override: true
)");
  auto o = routeChat(cfg, "small", {{"x-big", "yes"}});
  EXPECT_EQ(o.model, "large");
  EXPECT_EQ(o.route, "force-small-to-large");
  o = routeChat(cfg, "small");
  EXPECT_EQ(o.model, "small");
  EXPECT_EQ(o.route, "");
  // The first route (no override) is skipped for a configured name, the override one applies.
  o = routeChat(cfg, "tools", {{"x-team", "search"}});
  EXPECT_EQ(o.model, "model-b");
  EXPECT_EQ(o.route, "force-all-by-team");
  // An unconfigured name takes the first matching route, override or not.
  o = routeChat(cfg, "auto", {{"x-team", "search"}});
  EXPECT_EQ(o.model, "model-a");
  EXPECT_EQ(o.route, "plain");
}

TEST(RoutesOverride, UnknownModelWithoutMatchingRouteIs404) {
  auto cfg = mustLoad(R"(  - name: r
    match: {model: "gpt-*"}
    target: model-a
)");
  auto o = routeChat(cfg, "claude-3");
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::ModelNotFound);
  EXPECT_EQ(o.error->httpStatus(), 404);
  EXPECT_NE(o.error->message.find("claude-3"), std::string::npos) << o.error->message;
  EXPECT_EQ(o.model, "");
  EXPECT_EQ(o.route, "");
  // Without any routes, the same.
  auto none = loadConfigString(kBase, "r.yaml");
  ASSERT_TRUE(none.config) << none.error;
  o = routeChat(none.config, "auto");
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->kind, ErrorKind::ModelNotFound);
  EXPECT_EQ(routeChat(none.config, "small").model, "small");
}

// ---------------------------------------------------------------------------------------
// Cost-aware conditions

const char* kCostRoutes = R"(  - name: agentic
    match: {model: auto}
    when: {has_tools: true}
    target: tools
  - name: cheap
    match: {model: auto}
    when: {max_prompt_tokens: 200}
    target: small
  - name: big
    match: {model: auto}
    when: {min_prompt_tokens: 201}
    target: large
)";

TEST(RoutesCost, ShortLongAndTools) {
  auto cfg = mustLoad(kCostRoutes);
  auto o = routeChat(cfg, "auto");
  EXPECT_EQ(o.model, "small");
  EXPECT_EQ(o.route, "cheap");

  Request long_req;
  long_req.body = chat("auto", words(200));  // ~1000 words
  o = routeOn(cfg, long_req);
  EXPECT_EQ(o.model, "large");
  EXPECT_EQ(o.route, "big");

  Request tool_req;
  tool_req.body =
      R"({"model":"auto","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]})";
  o = routeOn(cfg, tool_req);
  EXPECT_EQ(o.model, "tools");
  EXPECT_EQ(o.route, "agentic");

  // An empty tools list is no tools.
  Request empty_tools;
  empty_tools.body = R"({"model":"auto","messages":[{"role":"user","content":"hi"}],"tools":[]})";
  EXPECT_EQ(routeOn(cfg, empty_tools).route, "cheap");

  // has_tools: false
  auto no_tools = mustLoad(R"(  - name: plain
    match: {model: auto}
    when: {has_tools: false}
    target: small
  - name: rest
    match: {model: auto}
    target: tools
)");
  EXPECT_EQ(routeChat(no_tools, "auto").route, "plain");
  EXPECT_EQ(routeOn(no_tools, tool_req).route, "rest");
}

TEST(RoutesCost, BoundariesAreInclusiveOnTheEstimate) {
  Request req;
  req.body = chat("auto", words(20));
  const auto n = estimateChatTokens(boost::json::parse(req.body).as_object());
  ASSERT_GT(n, 10);
  auto at = [&](const std::string& when) {
    return routeOn(mustLoad("  - name: r\n    match: {model: auto}\n    when: {" + when + "}\n    target: large\n"), req).route;
  };
  EXPECT_EQ(at("max_prompt_tokens: " + std::to_string(n)), "r");
  EXPECT_EQ(at("max_prompt_tokens: " + std::to_string(n - 1)), "");
  EXPECT_EQ(at("min_prompt_tokens: " + std::to_string(n)), "r");
  EXPECT_EQ(at("min_prompt_tokens: " + std::to_string(n + 1)), "");
  EXPECT_EQ(at("min_prompt_tokens: " + std::to_string(n) + ", max_prompt_tokens: " + std::to_string(n)), "r");
}

TEST(RoutesCost, MessagesUseTheAnthropicEstimate) {
  Request req;
  req.endpoint = Endpoint::Messages;
  req.path = "/v1/messages";
  req.body = R"({"model":"auto","max_tokens":64,"system":")" + words(100) +
             R"(","messages":[{"role":"user","content":"hi"}]})";
  const auto n = estimateAnthropicTokens(boost::json::parse(req.body).as_object());
  // The chat estimator would miss the system prompt (not a chat field): the two differ.
  ASSERT_GT(n, estimateChatTokens(boost::json::parse(req.body).as_object()) + 100);
  auto at = [&](std::int64_t max) {
    return routeOn(mustLoad("  - name: r\n    match: {model: auto}\n    when: {max_prompt_tokens: " + std::to_string(max) +
                            "}\n    target: small\n  - name: fallback\n    match: {model: auto}\n    target: large\n"),
                   req)
        .route;
  };
  EXPECT_EQ(at(n), "r");
  EXPECT_EQ(at(n - 1), "fallback");
  // Anthropic tools make has_tools true.
  Request tools = req;
  tools.body = R"({"model":"auto","max_tokens":64,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"t","input_schema":{"type":"object"}}]})";
  EXPECT_EQ(routeOn(mustLoad(kCostRoutes), tools).route, "agentic");
}

TEST(RoutesCost, CompletionsCountTheText) {
  auto cfg = mustLoad(kCostRoutes);
  Request shortp;
  shortp.endpoint = Endpoint::Completions;
  shortp.path = "/v1/completions";
  shortp.body = R"({"model":"auto","prompt":"hello"})";
  EXPECT_EQ(routeOn(cfg, shortp).route, "cheap");
  Request longp = shortp;
  longp.body = R"({"model":"auto","prompt":")" + words(200) + R"("})";
  EXPECT_EQ(routeOn(cfg, longp).route, "big");
}

// The hours condition against the real clock: windows built around "now" (with a
// margin of minutes so a minute boundary during the test does not matter).
TEST(RoutesCost, HoursIncludingAWindowOverMidnight) {
  auto hhmm = [](int minute) {
    minute = ((minute % 1440) + 1440) % 1440;
    char buf[8];
    std::snprintf(buf, sizeof buf, "%02d:%02d", minute / 60, minute % 60);
    return std::string(buf);
  };
  auto route = [&](int from, int to) {
    auto cfg = mustLoad("  - name: timed\n    match: {model: auto}\n    when: {hours: \"" + hhmm(from) + "-" + hhmm(to) +
                        "\"}\n    target: small\n");
    return routeChat(cfg, "auto").route;
  };
  const int now = static_cast<int>(
      std::chrono::duration_cast<std::chrono::minutes>(std::chrono::system_clock::now().time_since_epoch()).count() % 1440);
  EXPECT_EQ(route(now - 3, now + 3), "timed");
  EXPECT_EQ(route(now + 5, now + 10), "");
  EXPECT_EQ(route(now - 10, now - 5), "");
  // All day except a few minutes from now: wraps midnight unless now is near it.
  EXPECT_EQ(route(now + 5, now - 5 + 1440), "") << "(the window excludes now)";
  EXPECT_EQ(route(now + 5, now + 3), "timed");  // from > to in the day: wraps, includes now
  // An explicit midnight-wrapping window: 22:00-06:00.
  const bool night = now >= 22 * 60 || now < 6 * 60;
  auto cfg = mustLoad("  - name: night\n    match: {model: auto}\n    when: {hours: \"22:00-06:00\"}\n    target: small\n");
  EXPECT_EQ(routeChat(cfg, "auto").route, night ? "night" : "");
}

// ---------------------------------------------------------------------------------------
// Scale

TEST(RoutesScale, FiveThousandRoutes) {
  // 5,000 routes: exact names, globs and header-gated model-agnostic routes interleaved.
  std::string routes;
  for (int i = 0; i < 5000; ++i) {
    const std::string n = std::to_string(i);
    switch (i % 4) {
      case 0: routes += "  - name: exact-" + n + "\n    match: {model: m-" + n + "}\n    target: small\n"; break;
      case 1: routes += "  - name: glob-" + n + "\n    match: {model: \"g" + n + "-*\"}\n    target: large\n"; break;
      case 2:
        routes += "  - name: hdr-" + n + "\n    match: {headers: {x-route: \"" + n + "\"}}\n    target: tools\n";
        break;
      case 3:
        routes += "  - name: cost-" + n + "\n    match: {model: m-" + std::to_string(i - 3) +
                  "}\n    when: {min_prompt_tokens: 100000}\n    target: model-b\n";
        break;
    }
  }
  routes += "  - name: last\n    match: {model: \"zz-*\"}\n    target: model-a\n";
  auto t0 = std::chrono::steady_clock::now();
  auto cfg = mustLoad(routes);
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(cfg);
  ASSERT_EQ(cfg->routes.size(), 5001u);

  EXPECT_EQ(routeChat(cfg, "m-0").route, "exact-0");
  EXPECT_EQ(routeChat(cfg, "m-4996").route, "exact-4996");
  EXPECT_EQ(routeChat(cfg, "g4997-x").route, "glob-4997");
  EXPECT_EQ(routeChat(cfg, "anything", {{"x-route", "4998"}}).route, "hdr-4998");
  // m-4996 with the header of an earlier route: that one comes first.
  EXPECT_EQ(routeChat(cfg, "m-4996", {{"x-route", "2"}}).route, "hdr-2");
  EXPECT_EQ(routeChat(cfg, "zz-top").route, "last");
  EXPECT_EQ(routeChat(cfg, "zz-top").model, "model-a");
  EXPECT_TRUE(routeChat(cfg, "nothing").error);

  // Sanity timing (printed, not asserted): the worst case walks every agnostic route.
  auto filter = makeRouterFilter();
  Headers none;
  const std::string body = chat("zz-top");
  constexpr int kIters = 2000;
  int hits = 0;
  auto t2 = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) {
    RequestContext ctx;
    ctx.config = cfg;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.path = "/v1/chat/completions";
    ctx.headers = &none;
    ctx.body = body;
    filter->onRequestBody(ctx);
    filter->onUpstreamSelect(ctx);
    hits += ctx.route_name == "last";
  }
  auto t3 = std::chrono::steady_clock::now();
  EXPECT_EQ(hits, kIters);
  const std::string exact_body = chat("m-2000");
  auto t4 = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) {
    RequestContext ctx;
    ctx.config = cfg;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.path = "/v1/chat/completions";
    ctx.headers = &none;
    ctx.body = exact_body;
    filter->onRequestBody(ctx);
    filter->onUpstreamSelect(ctx);
    hits += ctx.route_name == "exact-2000";
  }
  auto t5 = std::chrono::steady_clock::now();
  EXPECT_EQ(hits, 2 * kIters);
  using us = std::chrono::duration<double, std::micro>;
  std::printf("[ timing ] load 5001 routes: %.1f ms; last-route decision: %.1f us; mid exact decision: %.1f us\n",
              us(t1 - t0).count() / 1000, us(t3 - t2).count() / kIters, us(t5 - t4).count() / kIters);
}

}  // namespace routes_test
}  // namespace tahua
