// `plugins:` entries and `Plugin` resources: the manifest read and checked, the code
// compiled and instantiated once in a scratch sandbox and its tests run (compilePlugin,
// runPluginTests: config/plugin_config.h), so a broken plugin is a config error naming
// its file and field, before any worker runs it.
#include <algorithm>
#include <filesystem>

#include <boost/json.hpp>

#include "config/loader_detail.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kPluginFields[] = {
    nonEmpty("id", "",
             "Lower-case letters, digits, '-', '_', '.'; at most 64; unique (a Plugin resource: its name).")
        .needed(),
    nonEmpty("version", "\"1\"", "Shown in logs, metrics and the admin API."),
    integer("order", 0, 1'000'000, "100", "Lower runs first; ties in config order."),
    list("phases", "",
         "request, response_headers, stream_event, complete, auth: checked against the functions the code defines "
         "(each listed must be defined, each defined listed); absent: not checked."),
    section("supports", "Which requests it runs for (all listed must match); not used by on_auth."),
    section("budgets", "The sandbox's bounds per call."),
    choice("failure_mode", "open | closed", "open",
           "A failed call: open goes on as if the plugin were not there; closed refuses (503 plugin_failed)."),
    section("breaker", "Failures in a row that skip the plugin on a worker for a while."),
    nonEmpty("source", "", "The Lua code inline (at most 1 MiB); one of source and file is required."),
    nonEmpty("file", "", "A path to the code, relative to the file that names it (at most 1 MiB)."),
    list("tests", "", "Self-tests run at every load; a version whose tests fail is refused, the last good one keeps running."),
    section("kv", "The key-value store (tahua.kv)."),
    section("http", "Outbound calls (tahua.http.request); absent: tahua.http is nil."),
    section("canary", "This version runs instead of another plugin for a share of requests."),
};
const Table kPlugin("plugins[]",
                    "A Lua plugin in a sandbox (docs/plugins.md); the same fields, without `id`, make a Plugin resource's "
                    "spec.",
                    kPluginFields);

constexpr Field kSupportsFields[] = {
    list("models", "", "Shell globs over the routed model; absent: any."),
    list("paths", "", "API paths (/v1/chat/completions, /v1/messages, /v1/embeddings, ...); absent: any."),
    map("headers", "", "Header name to a value or a list of values (\"*\": present)."),
    list("tenants", "", "Tenant names; absent: any."),
    list("keys", "", "Key names; absent: any."),
};
const Table kSupports("plugins[].supports", "Matchers compiled in C++: no Lua runs to choose a request's plugins.",
                      kSupportsFields);

constexpr Field kBudgetsFields[] = {
    integer("memory_bytes", 64 << 10, 256u << 20, "1048576", "The Lua state's memory; an allocation past it fails the call."),
    duration("cpu", 1, "50ms", "CPU time per call, at most 10s; past it the call is abandoned."),
    duration("slice", 1, "1ms",
             "How long a call runs on the worker's event loop (at most 100ms) before the rest runs on the plugin thread; "
             "the response phases' whole budget."),
};
const Table kBudgets("plugins[].budgets", "The sandbox's bounds per call.", kBudgetsFields);

// The plugin's breaker and a host's (http.breaker).
constexpr Field kPluginBreakerFields[] = {
    integer("failures", 1, 1'000'000, "5",
            "Failures in a row that open the breaker: the plugin's calls (an error or a budget), or a host's (no answer "
            "or a 5xx)."),
    duration("cooldown", 1, "30s",
             "How long it stays open: the plugin's calls are skipped (its failure mode applies), a host's fail at once "
             "(breaker open); then a call tries again."),
};
const Table kPluginBreaker("plugins[].breaker", "The plugin's breaker, on each worker.", kPluginBreakerFields);

constexpr Field kKvFields[] = {
    boolean("shared", "false", "tahua.kv.shared: the namespace shared by the plugins that opt in."),
};
const Table kKv("plugins[].kv", "The plugin's key-value store; its own keys always.", kKvFields);

constexpr Field kHttpFields[] = {
    list("allow", "", "The hosts the plugin may call: \"host\" or \"host:port\"; nothing else is reachable.").needed(),
    duration("timeout", 1, "2s", "The longest a call may take (at most 30s; a call may ask for less)."),
    integer("max_response_bytes", 1, 1 << 20, "65536", "A larger answer fails the call (response too large)."),
    section("breaker", "Per host: failures in a row (no answer, 5xx) that stop calls to it for a while."),
};
const Table kHttp("plugins[].http", "tahua.http.request: the hosts a plugin may call and the bounds of a call.", kHttpFields);

const Table kHttpBreaker("plugins[].http.breaker", "A breaker per host the plugin calls.", kPluginBreakerFields);

constexpr Field kPluginCanaryFields[] = {
    nonEmpty("of", "", "The id of the plugin this version is a canary of.").needed(),
    number("percent", 100, "", "The share of requests it takes.", "a percentage").needed(),
    nonEmpty("sticky_header", "",
             "The header hashed to pick a request's side, so a user stays on one; absent: the API key, else the "
             "request id."),
};
const Table kPluginCanary("plugins[].canary", "A canary version of another plugin.", kPluginCanaryFields);

constexpr Field kTestFields[] = {
    nonEmpty("name", "", "Names the test in a failure; absent: `#<number>`."),
    choice("phase", "request | auth", "",
           "The phase tested; absent: request, or auth for a plugin that defines only on_auth."),
    section("request", "The request it is called with."),
    section("expect", "What the call must do."),
};
const Table kTest("plugins[].tests[]", "A fixture run against on_request (or on_auth) when the plugin is loaded.", kTestFields);

constexpr Field kTestRequestFields[] = {
    nonEmpty("model", "test-model", "The routed model."),
    nonEmpty("path", "/v1/chat/completions", "The API path."),
    map("headers", "{}", "The client's headers."),
    nonEmpty("body", "",
             "The body as JSON text; absent: {\"model\": <model>, \"messages\": [{\"role\": \"user\", \"content\": "
             "\"hi\"}]}."),
    nonEmpty("tenant", "", "The caller's tenant name."),
    nonEmpty("key", "", "The caller's key name."),
};
const Table kTestRequest("plugins[].tests[].request", "A test's request.", kTestRequestFields);

constexpr Field kTestExpectFields[] = {
    choice("outcome", "continue | deny | authenticate | pass", "",
           "on_request: continue or deny; on_auth: authenticate, pass or deny."),
    integer("status", 400, 499, "", "The refusal's status (implies deny)."),
    nonEmpty("code", "", "The refusal's error code (implies deny)."),
    map("headers", "{}", "Upstream headers the call sets."),
    map("fields", "{}", "Body field paths and their JSON values after the call."),
    nonEmpty("tenant", "", "on_auth: the tenant it authenticates (implies authenticate)."),
    nonEmpty("key", "", "on_auth: the key it names."),
};
const Table kTestExpect("plugins[].tests[].expect", "What a test's call must do; only the fields given are compared.",
                        kTestExpectFields);

constexpr std::size_t kMaxPlugins = 128;
constexpr std::size_t kMaxSourceBytes = 1 << 20;

bool validId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.')) return false;
  return id.front() != '.' && id.front() != '-';
}

// The API paths a plugin may be limited to, as bits of Endpoint (request_context.h;
// plugin_filter.cpp checks the numbering).
struct PathBit {
  std::string_view path;
  int endpoint;
};
constexpr PathBit kPaths[] = {{"/v1/chat/completions", 1}, {"/v1/completions", 2},     {"/v1/embeddings", 3},
                              {"/v1/models", 4},           {"/v1/responses", 5},       {"/v1/messages", 6},
                              {"/v1/messages/count_tokens", 7}, {"/v1/moderations", 9}, {"/v1/images/generations", 10},
                              {"/v1/rerank", 11}, {"/v1/audio/transcriptions", 12}, {"/v1/audio/translations", 13},
                              {"/v1/audio/speech", 14}, {"/v1/images/edits", 15}, {"/v1/files", 16}, {"/v1/batches", 19},
                              {"/v1/realtime", 22}, {"/mcp", 23}};

}  // namespace

void sortPlugins(Config& cfg) {
  std::stable_sort(cfg.plugins.begin(), cfg.plugins.end(), [](const PluginConfig& a, const PluginConfig& b) { return a.order < b.order; });
}

void Loader::checkAuthPlugins(const YAML::Node& auth, const Config& cfg) {
  for (std::size_t c = 0; c < cfg.auth.chains.size(); ++c)
    for (std::size_t l = 0; l < cfg.auth.chains[c].links.size(); ++l) {
      const AuthLinkConfig& link = cfg.auth.chains[c].links[l];
      if (link.type != AuthLinkConfig::Type::Plugin) continue;
      for (const auto& p : cfg.plugins)
        if (p.id == link.plugin && !(p.phases & kPluginAuth))
          fail(auth["chains"][c]["links"][l]["id"], "auth.chains[" + std::to_string(c) + "].links[" + std::to_string(l) + "].id",
               "plugin \"" + p.id + "\" defines no on_auth");
    }
}

void Loader::loadPlugins(const YAML::Node& n, Config& cfg) {
  if (!n.IsSequence()) fail(n, "plugins", "expected a list of plugins");
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string p = "plugins[" + std::to_string(i) + "]";
    Fields f(*this, n[i], p, kPlugin);
    std::string id;
    f.read("id", id);
    plugin(n[i], p, id, cfg);
  }
  sortPlugins(cfg);
}

void Loader::plugin(const YAML::Node& y, const std::string& p, const std::string& id, Config& cfg) {
  const bool resource = !y["id"];
  // A `plugins:` entry (its id read already) or a Plugin resource's spec (its name the id).
  Fields f(*this, y, p, kPlugin);
  if (!validId(id))
    fail(resource ? y : y["id"], resource ? p : p + ".id",
         "\"" + id + "\" is not a plugin id (lower-case letters, digits, '-', '_', '.'; at most 64)");
  for (const auto& other : cfg.plugins)
    if (other.id == id) fail(resource ? y : y["id"], resource ? p : p + ".id", "a plugin \"" + id + "\" is declared twice");
  if (cfg.plugins.size() >= kMaxPlugins) fail(y, p, "at most " + std::to_string(kMaxPlugins) + " plugins");

  PluginConfig pc;
  pc.id = id;
  pc.origin = fileOf(p);
  if (!f.read("version", pc.version)) pc.version = "1";
  f.read("order", pc.order);

  if (auto s = f["supports"]) {
    const std::string sp = p + ".supports";
    Fields sf(*this, s, sp, kSupports);
    auto names = [&](const char* key, std::vector<std::string>& out) {
      const YAML::Node list = sf[key];
      if (!list) return;
      const std::string lp = join(sp, key);
      if (!list.IsSequence() || list.size() == 0) fail(list, lp, "expected a non-empty list");
      for (std::size_t i = 0; i < list.size(); ++i) out.push_back(nonEmpty(list[i], lp + "[" + std::to_string(i) + "]"));
    };
    names("models", pc.supports.models);
    names("tenants", pc.supports.tenants);
    names("keys", pc.supports.keys);
    std::vector<std::string> paths;
    names("paths", paths);
    for (std::size_t i = 0; i < paths.size(); ++i) {
      const auto* hit = std::find_if(std::begin(kPaths), std::end(kPaths), [&](const PathBit& b) { return b.path == paths[i]; });
      if (hit == std::end(kPaths)) {
        std::string list;
        for (const auto& b : kPaths) list += (list.empty() ? "" : ", ") + std::string(b.path);
        fail(s["paths"][i], sp + ".paths[" + std::to_string(i) + "]", "unknown API path \"" + paths[i] + "\" (one of " + list + ")");
      }
      pc.supports.endpoints |= 1u << hit->endpoint;
    }
    if (auto h = sf["headers"]) {
      const std::string hp = sp + ".headers";
      if (!h.IsMap() || h.size() == 0) fail(h, hp, "expected a mapping of header names to a value or a list of values (\"*\": present)");
      for (const auto& kv : h) {
        std::string name = kv.first.as<std::string>();
        const std::string np = hp + "." + name;
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        std::vector<std::string> values;
        if (kv.second.IsSequence()) {
          if (kv.second.size() == 0) fail(kv.second, np, "expected a value or a non-empty list");
          for (std::size_t i = 0; i < kv.second.size(); ++i) values.push_back(str(kv.second[i], np + "[" + std::to_string(i) + "]"));
        } else {
          values.push_back(str(kv.second, np));
        }
        pc.supports.headers.emplace_back(std::move(name), std::move(values));
      }
    }
  }

  if (auto b = f["budgets"]) {
    const std::string bp = p + ".budgets";
    Fields bf(*this, b, bp, kBudgets);
    bf.read("memory_bytes", pc.memory_bytes);
    if (auto v = std::chrono::duration_cast<Millis>(pc.cpu); bf.read("cpu", v)) pc.cpu = v;
    if (auto v = std::chrono::duration_cast<Millis>(pc.slice); bf.read("slice", v)) pc.slice = v;
    if (pc.cpu > std::chrono::seconds(10)) fail(b["cpu"], bp + ".cpu", "at most 10s");
    if (pc.slice > std::chrono::milliseconds(100)) fail(b["slice"], bp + ".slice", "at most 100ms (a slice holds the worker's event loop)");
  }
  if (auto v = f["failure_mode"]) {
    const std::string m = str(v, p + ".failure_mode");
    if (m != "open" && m != "closed") fail(v, p + ".failure_mode", "expected open or closed");
    pc.fail_closed = m == "closed";
  }
  if (auto b = f["breaker"]) {
    Fields bf(*this, b, p + ".breaker", kPluginBreaker);
    bf.read("failures", pc.breaker_failures);
    bf.read("cooldown", pc.breaker_cooldown);
  }

  if (auto k = f["kv"]) {
    Fields kf(*this, k, p + ".kv", kKv);
    kf.read("shared", pc.kv_shared);
  }

  if (auto h = f["http"]) {
    const std::string hp = p + ".http";
    Fields hf(*this, h, hp, kHttp);
    const YAML::Node allow = hf["allow"];
    if (!allow || !allow.IsSequence() || allow.size() == 0)
      fail(allow ? allow : h, hp + ".allow", "required: the hosts the plugin may call (\"host\" or \"host:port\")");
    for (std::size_t i = 0; i < allow.size(); ++i) {
      const std::string ap = hp + ".allow[" + std::to_string(i) + "]";
      std::string entry = nonEmpty(allow[i], ap);
      std::transform(entry.begin(), entry.end(), entry.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      // host, host:port, [v6], [v6]:port (a bare v6 address has no port)
      std::string host = entry, port;
      if (entry.front() == '[') {
        const auto close = entry.find(']');
        if (close == std::string::npos) fail(allow[i], ap, "expected host or host:port");
        host = entry.substr(1, close - 1);
        if (close + 1 < entry.size()) {
          if (entry[close + 1] != ':') fail(allow[i], ap, "expected host or host:port");
          port = entry.substr(close + 2);
        }
      } else if (std::count(entry.begin(), entry.end(), ':') == 1) {
        host = entry.substr(0, entry.find(':'));
        port = entry.substr(entry.find(':') + 1);
      }
      if (entry.find(':') != std::string::npos && entry.front() != '[' && std::count(entry.begin(), entry.end(), ':') == 1 &&
          (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos))
        fail(allow[i], ap, "expected host or host:port");
      if (host.empty() || host.find_first_of("/@?# ") != std::string::npos) fail(allow[i], ap, "expected host or host:port");
      pc.http.allow.emplace_back(std::move(host), std::move(port));
    }
    hf.read("timeout", pc.http.timeout);
    if (pc.http.timeout > std::chrono::seconds(30)) fail(h["timeout"], hp + ".timeout", "at most 30s");
    hf.read("max_response_bytes", pc.http.max_response_bytes);
    if (auto b = hf["breaker"]) {
      Fields bf(*this, b, hp + ".breaker", kHttpBreaker);
      bf.read("failures", pc.http.breaker_failures);
      bf.read("cooldown", pc.http.breaker_cooldown);
    }
  }

  if (auto c = f["canary"]) {
    const std::string cp = p + ".canary";
    Fields cf(*this, c, cp, kPluginCanary);
    if (!c["of"]) fail(c, cp + ".of", "required: the id of the plugin this version is a canary of");
    cf.read("of", pc.canary.of);
    if (!validId(pc.canary.of)) fail(c["of"], cp + ".of", "\"" + pc.canary.of + "\" is not a plugin id");
    if (pc.canary.of == id) fail(c["of"], cp + ".of", "a plugin cannot be its own canary");
    if (!c["percent"]) fail(c, cp + ".percent", "required: the share of requests (0..100)");
    pc.canary.percent = percent(c["percent"], cp + ".percent");
    if (cf.read("sticky_header", pc.canary.sticky_header)) {
      std::transform(pc.canary.sticky_header.begin(), pc.canary.sticky_header.end(), pc.canary.sticky_header.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    }
  }

  // The code: inline, or a file next to the config.
  if (!y["source"] == !y["file"]) fail(y, p, "one of `source` (the Lua code) or `file` (a path to it) is required");
  std::string source;
  std::string where = p + ".source";
  if (!f.read("source", source)) {
    where = p + ".file";
    std::string name;
    f.read("file", name);
    std::filesystem::path file = name;
    if (file.is_relative()) file = std::filesystem::path(fileOf(p)).parent_path() / file;
    bool ok = false;
    std::error_code ec;
    if (std::filesystem::file_size(file, ec) > kMaxSourceBytes && !ec) fail(y["file"], where, "larger than 1 MiB");
    source = slurp(file, ok);
    if (!ok) fail(y["file"], where, "cannot read " + file.string());
  }
  if (source.size() > kMaxSourceBytes) fail(y["source"] ? y["source"] : y["file"], where, "larger than 1 MiB");

  if (std::string error = compilePlugin(pc, source); !error.empty()) fail(y["source"] ? y["source"] : y["file"], where, error);

  if (auto ph = f["phases"]) {
    const std::string pp = p + ".phases";
    if (!ph.IsSequence() || ph.size() == 0) fail(ph, pp, "expected a non-empty list of request | response_headers | stream_event | complete | auth");
    std::uint8_t declared = 0;
    for (std::size_t i = 0; i < ph.size(); ++i) {
      const std::string name = str(ph[i], pp + "[" + std::to_string(i) + "]");
      const std::uint8_t bit = pluginPhaseNamed(name);
      if (!bit) fail(ph[i], pp + "[" + std::to_string(i) + "]", "unknown phase \"" + name + "\" (request | response_headers | stream_event | complete | auth)");
      if (!(pc.phases & bit)) fail(ph[i], pp + "[" + std::to_string(i) + "]", "the code defines no " + std::string(pluginPhaseFunction(bit)));
      declared |= bit;
    }
    for (std::uint8_t bit : kPluginPhaseBits)
      if ((pc.phases & bit) && !(declared & bit))
        fail(ph, pp, std::string("the code defines ") + pluginPhaseFunction(bit) + " but the phase is not listed");
  }
  if (auto ts = f["tests"]) {
    const std::string tp = p + ".tests";
    if (!ts.IsSequence() || ts.size() == 0) fail(ts, tp, "expected a list of tests ({name, request, expect})");
    auto pairs = [&](const YAML::Node& m, const std::string& mp, bool json_values) {
      std::vector<std::pair<std::string, std::string>> out;
      if (!m.IsMap()) fail(m, mp, "expected a mapping");
      for (const auto& kv : m) {
        const std::string k = kv.first.as<std::string>();
        if (!kv.second.IsScalar()) fail(kv.second, mp + "." + k, "expected a value");
        out.emplace_back(k, json_values ? jsonScalar(kv.second) : kv.second.Scalar());
      }
      return out;
    };
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const YAML::Node t = ts[i];
      const std::string ti = tp + "[" + std::to_string(i) + "]";
      Fields tf(*this, t, ti, kTest);
      PluginTest pt;
      if (!tf.read("name", pt.name)) pt.name = "#" + std::to_string(i + 1);
      // on_request by default; on_auth for a plugin that defines only that.
      pt.phase = (pc.phases & kPluginRequest) || !(pc.phases & kPluginAuth) ? kPluginRequest : kPluginAuth;
      if (auto v = tf["phase"]) {
        const std::string ph = str(v, ti + ".phase");
        if (ph != "request" && ph != "auth") fail(v, ti + ".phase", "expected request or auth (the phases tests exercise)");
        pt.phase = pluginPhaseNamed(ph);
        if (!(pc.phases & pt.phase)) fail(v, ti + ".phase", std::string("the code defines no ") + pluginPhaseFunction(pt.phase));
      }
      if (auto r = tf["request"]) {
        const std::string rp = ti + ".request";
        Fields rf(*this, r, rp, kTestRequest);
        rf.read("model", pt.model);
        rf.read("path", pt.path);
        if (auto v = rf["headers"]) pt.headers = pairs(v, rp + ".headers", false);
        rf.read("body", pt.body);
        rf.read("tenant", pt.tenant);
        rf.read("key", pt.key);
      }
      if (auto e = tf["expect"]) {
        const std::string ep = ti + ".expect";
        Fields ef(*this, e, ep, kTestExpect);
        if (auto v = ef["outcome"]) {
          const std::string o = str(v, ep + ".outcome");
          const bool auth = pt.phase == kPluginAuth;
          if (auth ? o != "authenticate" && o != "pass" && o != "deny" : o != "continue" && o != "deny")
            fail(v, ep + ".outcome", auth ? "expected authenticate, pass or deny (on_auth)" : "expected continue or deny");
          pt.expect_deny = o == "deny";
          pt.expect_authenticate = o == "authenticate";
        }
        for (const char* k : {"tenant", "key"})
          if (auto v = ef[k]) {
            if (pt.phase != kPluginAuth) fail(v, ep + "." + k, "only for tests of on_auth (phase: auth)");
            (std::string_view(k) == "tenant" ? pt.expect_tenant : pt.expect_key) = nonEmpty(v, ep + "." + k);
            pt.expect_authenticate = true;
          }
        if (ef.read("status", pt.expect_status)) pt.expect_deny = true;
        if (ef.read("code", pt.expect_code)) pt.expect_deny = true;
        if (auto v = ef["headers"]) pt.expect_headers = pairs(v, ep + ".headers", false);
        if (auto v = ef["fields"]) pt.expect_fields = pairs(v, ep + ".fields", true);
      }
      pc.tests.push_back(std::move(pt));
    }
    // A version whose tests fail is refused: the config (or the admin PUT) fails, and
    // the running version stays.
    if (std::string failure = runPluginTests(pc); !failure.empty()) fail(ts, tp, failure);
  }
  cfg.plugins.push_back(std::move(pc));
}

}  // namespace tahua::config_detail
