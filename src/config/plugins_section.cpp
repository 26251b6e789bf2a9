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
    checkKeys(n[i], p, {"id", "version", "order", "phases", "supports", "budgets", "failure_mode", "breaker", "source", "file", "tests", "kv", "http", "canary"});
    if (!n[i]["id"]) fail(n[i], p + ".id", "required");
    const std::string id = nonEmpty(n[i]["id"], p + ".id");
    plugin(n[i], p, id, cfg);
  }
  sortPlugins(cfg);
}

void Loader::plugin(const YAML::Node& y, const std::string& p, const std::string& id, Config& cfg) {
  const bool resource = !y["id"];
  if (resource)
    checkKeys(y, p, {"version", "order", "phases", "supports", "budgets", "failure_mode", "breaker", "source", "file", "tests", "kv", "http", "canary"});
  if (!validId(id))
    fail(resource ? y : y["id"], resource ? p : p + ".id",
         "\"" + id + "\" is not a plugin id (lower-case letters, digits, '-', '_', '.'; at most 64)");
  for (const auto& other : cfg.plugins)
    if (other.id == id) fail(resource ? y : y["id"], resource ? p : p + ".id", "a plugin \"" + id + "\" is declared twice");
  if (cfg.plugins.size() >= kMaxPlugins) fail(y, p, "at most " + std::to_string(kMaxPlugins) + " plugins");

  PluginConfig pc;
  pc.id = id;
  pc.origin = fileOf(p);
  pc.version = y["version"] ? nonEmpty(y["version"], p + ".version") : "1";
  if (auto v = y["order"]) pc.order = static_cast<int>(integer(v, p + ".order", 0, 1'000'000));

  if (auto s = y["supports"]) {
    const std::string sp = p + ".supports";
    checkKeys(s, sp, {"models", "paths", "headers", "tenants", "keys"});
    auto names = [&](const char* key, std::vector<std::string>& out) {
      const YAML::Node list = s[key];
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
    if (auto h = s["headers"]) {
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

  if (auto b = y["budgets"]) {
    const std::string bp = p + ".budgets";
    checkKeys(b, bp, {"memory_bytes", "cpu", "slice"});
    if (auto v = b["memory_bytes"]) pc.memory_bytes = integer(v, bp + ".memory_bytes", 64 << 10, 256u << 20);
    if (auto v = b["cpu"]) pc.cpu = duration(v, bp + ".cpu", Millis(1));
    if (auto v = b["slice"]) pc.slice = duration(v, bp + ".slice", Millis(1));
    if (pc.cpu > std::chrono::seconds(10)) fail(b["cpu"], bp + ".cpu", "at most 10s");
    if (pc.slice > std::chrono::milliseconds(100)) fail(b["slice"], bp + ".slice", "at most 100ms (a slice holds the worker's event loop)");
  }
  if (auto v = y["failure_mode"]) {
    const std::string m = str(v, p + ".failure_mode");
    if (m != "open" && m != "closed") fail(v, p + ".failure_mode", "expected open or closed");
    pc.fail_closed = m == "closed";
  }
  if (auto b = y["breaker"]) {
    const std::string bp = p + ".breaker";
    checkKeys(b, bp, {"failures", "cooldown"});
    if (auto v = b["failures"]) pc.breaker_failures = static_cast<std::uint32_t>(integer(v, bp + ".failures", 1, 1'000'000));
    if (auto v = b["cooldown"]) pc.breaker_cooldown = duration(v, bp + ".cooldown", Millis(1));
  }

  if (auto k = y["kv"]) {
    checkKeys(k, p + ".kv", {"shared"});
    if (auto v = k["shared"]) pc.kv_shared = boolean(v, p + ".kv.shared");
  }

  if (auto h = y["http"]) {
    const std::string hp = p + ".http";
    checkKeys(h, hp, {"allow", "timeout", "max_response_bytes", "breaker"});
    const YAML::Node allow = h["allow"];
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
    if (auto v = h["timeout"]) pc.http.timeout = duration(v, hp + ".timeout", Millis(1));
    if (pc.http.timeout > std::chrono::seconds(30)) fail(h["timeout"], hp + ".timeout", "at most 30s");
    if (auto v = h["max_response_bytes"]) pc.http.max_response_bytes = integer(v, hp + ".max_response_bytes", 1, 1 << 20);
    if (auto b = h["breaker"]) {
      checkKeys(b, hp + ".breaker", {"failures", "cooldown"});
      if (auto v = b["failures"]) pc.http.breaker_failures = static_cast<std::uint32_t>(integer(v, hp + ".breaker.failures", 1, 1'000'000));
      if (auto v = b["cooldown"]) pc.http.breaker_cooldown = duration(v, hp + ".breaker.cooldown", Millis(1));
    }
  }

  if (auto c = y["canary"]) {
    const std::string cp = p + ".canary";
    checkKeys(c, cp, {"of", "percent", "sticky_header"});
    if (!c["of"]) fail(c, cp + ".of", "required: the id of the plugin this version is a canary of");
    pc.canary.of = nonEmpty(c["of"], cp + ".of");
    if (!validId(pc.canary.of)) fail(c["of"], cp + ".of", "\"" + pc.canary.of + "\" is not a plugin id");
    if (pc.canary.of == id) fail(c["of"], cp + ".of", "a plugin cannot be its own canary");
    if (!c["percent"]) fail(c, cp + ".percent", "required: the share of requests (0..100)");
    pc.canary.percent = percent(c["percent"], cp + ".percent");
    if (auto v = c["sticky_header"]) {
      pc.canary.sticky_header = nonEmpty(v, cp + ".sticky_header");
      std::transform(pc.canary.sticky_header.begin(), pc.canary.sticky_header.end(), pc.canary.sticky_header.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    }
  }

  // The code: inline, or a file next to the config.
  if (!y["source"] == !y["file"]) fail(y, p, "one of `source` (the Lua code) or `file` (a path to it) is required");
  std::string source;
  std::string where = p + ".source";
  if (auto s = y["source"]) {
    source = nonEmpty(s, where);
  } else {
    where = p + ".file";
    std::filesystem::path f = nonEmpty(y["file"], where);
    if (f.is_relative()) f = std::filesystem::path(fileOf(p)).parent_path() / f;
    bool ok = false;
    std::error_code ec;
    if (std::filesystem::file_size(f, ec) > kMaxSourceBytes && !ec) fail(y["file"], where, "larger than 1 MiB");
    source = slurp(f, ok);
    if (!ok) fail(y["file"], where, "cannot read " + f.string());
  }
  if (source.size() > kMaxSourceBytes) fail(y["source"] ? y["source"] : y["file"], where, "larger than 1 MiB");

  if (std::string error = compilePlugin(pc, source); !error.empty()) fail(y["source"] ? y["source"] : y["file"], where, error);

  if (auto ph = y["phases"]) {
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
  if (auto ts = y["tests"]) {
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
      checkKeys(t, ti, {"name", "phase", "request", "expect"});
      PluginTest pt;
      pt.name = t["name"] ? nonEmpty(t["name"], ti + ".name") : "#" + std::to_string(i + 1);
      // on_request by default; on_auth for a plugin that defines only that.
      pt.phase = (pc.phases & kPluginRequest) || !(pc.phases & kPluginAuth) ? kPluginRequest : kPluginAuth;
      if (auto v = t["phase"]) {
        const std::string ph = str(v, ti + ".phase");
        if (ph != "request" && ph != "auth") fail(v, ti + ".phase", "expected request or auth (the phases tests exercise)");
        pt.phase = pluginPhaseNamed(ph);
        if (!(pc.phases & pt.phase)) fail(v, ti + ".phase", std::string("the code defines no ") + pluginPhaseFunction(pt.phase));
      }
      if (auto r = t["request"]) {
        const std::string rp = ti + ".request";
        checkKeys(r, rp, {"model", "path", "headers", "body", "tenant", "key"});
        if (auto v = r["model"]) pt.model = nonEmpty(v, rp + ".model");
        if (auto v = r["path"]) pt.path = nonEmpty(v, rp + ".path");
        if (auto v = r["headers"]) pt.headers = pairs(v, rp + ".headers", false);
        if (auto v = r["body"]) pt.body = nonEmpty(v, rp + ".body");
        if (auto v = r["tenant"]) pt.tenant = nonEmpty(v, rp + ".tenant");
        if (auto v = r["key"]) pt.key = nonEmpty(v, rp + ".key");
      }
      if (auto e = t["expect"]) {
        const std::string ep = ti + ".expect";
        checkKeys(e, ep, {"outcome", "status", "code", "headers", "fields", "tenant", "key"});
        if (auto v = e["outcome"]) {
          const std::string o = str(v, ep + ".outcome");
          const bool auth = pt.phase == kPluginAuth;
          if (auth ? o != "authenticate" && o != "pass" && o != "deny" : o != "continue" && o != "deny")
            fail(v, ep + ".outcome", auth ? "expected authenticate, pass or deny (on_auth)" : "expected continue or deny");
          pt.expect_deny = o == "deny";
          pt.expect_authenticate = o == "authenticate";
        }
        for (const char* k : {"tenant", "key"})
          if (auto v = e[k]) {
            if (pt.phase != kPluginAuth) fail(v, ep + "." + k, "only for tests of on_auth (phase: auth)");
            (std::string_view(k) == "tenant" ? pt.expect_tenant : pt.expect_key) = nonEmpty(v, ep + "." + k);
            pt.expect_authenticate = true;
          }
        if (auto v = e["status"]) {
          pt.expect_status = static_cast<int>(integer(v, ep + ".status", 400, 499));
          pt.expect_deny = true;
        }
        if (auto v = e["code"]) {
          pt.expect_code = nonEmpty(v, ep + ".code");
          pt.expect_deny = true;
        }
        if (auto v = e["headers"]) pt.expect_headers = pairs(v, ep + ".headers", false);
        if (auto v = e["fields"]) pt.expect_fields = pairs(v, ep + ".fields", true);
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
