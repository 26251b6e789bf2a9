// The admin API (/admin/v1/...), served only on the admin listener and only with the
// admin token. What it changes goes through the same path as a config reload: a new
// immutable snapshot published to every worker (canary percentages, whole configs), or
// a new node-status table. Requests in flight keep what they started with.
//
//   GET  /admin/v1/config                  active config (no secrets) and its generation
//   PUT  /admin/v1/config                  YAML body: validate and publish
//   GET  /admin/v1/deployments             models, deployments, live state, canary split
//   PUT  /admin/v1/models/{name}/canary    {"percent": 0..100}
//   GET  /admin/v1/nodes                   node status reports
//   PUT  /admin/v1/nodes/{id}/status       {"state", "gpu_util", "gpu_memory", ...}
//   POST /admin/v1/drain                   graceful drain, as SIGTERM
//   GET  /admin/v1/whoami                  the calling token: {name, full, tenant?} (any admin token)
//   tenants, keys                           see admin/tenant_admin.h
//   audit                                   see admin/audit_log.h
//   resources, plugins                      see admin/resource_admin.h
//   endpoints                               see admin/endpoint_admin.h
//   mcp/tools                               see admin/mcp_admin.h
//   usage                                   see admin/usage_admin.h
#include "admin/admin_api.h"
#include "admin/admin_error.h"
#include "admin/console/console_page.h"
#include "admin/dashboard/dashboard_page.h"

#include <openssl/crypto.h>
#include <signal.h>
#include <unistd.h>

#include <boost/json.hpp>

#include "admin/cache_admin.h"
#include "admin/mcp_admin.h"
#include "admin/store_writes.h"
#include "admin/usage_admin.h"
#include "core/json_read.h"
#include "core/json_text.h"
#include "filters/balancer/balancer_filter.h"
#include "core/log.h"
#include "core/sha256.h"

namespace tahua {
namespace asio = boost::asio;
namespace bj = boost::json;

AdminReply adminError(int status, std::string_view code, std::string message) {
  return {status, bj::serialize(bj::object{{"error", bj::object{{"message", message}, {"type", "admin_error"}, {"code", code}}}})};
}

namespace {

constexpr std::size_t kMaxNodes = 10'000;

AdminReply ok(bj::object o) { return {200, jsonText(o)}; }

// The admin token ("admin"), a named global token (admin.tokens) or a tenant's token
// (admin.tenant_tokens); the named ones are looked up by their SHA-256. None: nullopt.
std::optional<AdminCaller> caller(const Config& cfg, std::string_view authorization) {
  constexpr std::string_view kBearer = "bearer ";  // the scheme is case-insensitive (RFC 9110)
  if (!cfg.admin.enabled || authorization.size() <= kBearer.size()) return std::nullopt;
  for (std::size_t i = 0; i < kBearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kBearer[i]) return std::nullopt;
  std::string_view presented = authorization.substr(kBearer.size());
  const std::string& token = cfg.admin.token;
  // Constant time over the token's length: no early exit that times the prefix.
  if (!token.empty() && presented.size() == token.size() && CRYPTO_memcmp(presented.data(), token.data(), token.size()) == 0)
    return AdminCaller{true, "", "admin"};
  if (cfg.admin.tokens.empty() && cfg.admin.tenant_tokens.empty()) return std::nullopt;
  const Sha256 digest = sha256(presented);
  for (const auto& t : cfg.admin.tokens)
    if (CRYPTO_memcmp(digest.data(), t.sha256.data(), digest.size()) == 0) return AdminCaller{true, "", t.name};
  for (const auto& t : cfg.admin.tenant_tokens)
    if (CRYPTO_memcmp(digest.data(), t.sha256.data(), digest.size()) == 0) return AdminCaller{false, t.tenant, t.name};
  return std::nullopt;
}

bj::object deploymentJson(const DeploymentConfig& d) {
  bj::object labels;
  for (const auto& [k, v] : d.labels) labels[k] = v;
  bj::object o{{"id", d.id},         {"provider", d.provider}, {"upstream_model", d.upstream_model},
               {"weight", d.weight}, {"version", d.version},   {"labels", std::move(labels)},
               {"node", d.node},     {"source", d.source}};
  // Discovery: the endpoint's address, and the name it was found under.
  if (!d.address.empty()) o["address"] = d.address;
  if (d.dns) o["dns"] = d.dns->name;
  return o;
}

bj::object canaryJson(const CanaryConfig& c) {
  bj::object o{{"enabled", c.enabled}};
  if (c.enabled) {
    o["version"] = c.version;
    o["percent"] = c.percent;
    o["sticky_header"] = c.sticky_header;
    o["allow"] = bj::value_from(c.allow);
  }
  return o;
}

bj::object configJson(const Config& cfg) {
  bj::array providers;
  for (const auto& p : cfg.providers) {
    bj::object o{{"name", p.name}, {"type", p.type}, {"usable", p.usable}};
    if (!p.base_url.empty()) o["base_url"] = p.base_url;  // never credentials (the loader refuses them in URLs)
    providers.push_back(std::move(o));
  }
  bj::array models;
  for (const auto& m : cfg.models) {
    bj::array ds;
    for (const auto& d : m.deployments) ds.push_back(deploymentJson(d));
    models.push_back(bj::object{{"name", m.name},
                                {"balancing", balancePolicyName(m.balancing)},
                                {"canary", canaryJson(m.canary)},
                                {"deployments", std::move(ds)}});
  }
  return bj::object{{"generation", cfg.generation}, {"source", cfg.source}, {"providers", std::move(providers)},
                    {"models", std::move(models)}};
}

bj::object nodeJson(const NodeStatus& s, SteadyClock::time_point now) {
  return bj::object{{"state", nodeStateName(s.state)},
                    {"gpu_util", s.gpu_util},
                    {"gpu_memory", s.gpu_memory},
                    {"active_connections", s.active_connections},
                    {"queued_requests", s.queued_requests},
                    {"avg_latency_ms", s.avg_latency_ms},
                    {"age_ms", std::chrono::duration_cast<std::chrono::milliseconds>(now - s.reported).count()}};
}

// A number field in [lo, hi]; absent = `fallback`.
bool numberField(const bj::object& o, std::string_view key, double lo, double hi, double fallback, double& out,
                 std::string& problem) {
  const bj::value* v = o.if_contains(key);
  if (!v) {
    out = fallback;
    return true;
  }
  if (!v->is_number()) {
    problem = std::string(key) + " must be a number";
    return false;
  }
  out = v->to_number<double>();
  if (!(out >= lo && out <= hi)) {
    problem = std::string(key) + " must be between " + std::to_string(lo) + " and " + std::to_string(hi);
    return false;
  }
  return true;
}

bool validNodeId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':')) return false;
  return true;
}

// A node status report's fields (the admin API's body, and the shared store's record).
bool parseNodeStatus(const bj::object& o, NodeStatus& s, std::string& problem) {
  const auto* state = o.if_contains("state");
  if (!state || !state->is_string() || !parseNodeState(state->get_string())) {
    problem = "state must be one of HEALTHY, DEGRADED, OVERLOADED, UNHEALTHY.";
    return false;
  }
  s.state = *parseNodeState(state->get_string());
  return numberField(o, "gpu_util", 0, 1, 0, s.gpu_util, problem) && numberField(o, "gpu_memory", 0, 1, 0, s.gpu_memory, problem) &&
         numberField(o, "active_connections", 0, 1e9, 0, s.active_connections, problem) &&
         numberField(o, "queued_requests", 0, 1e9, 0, s.queued_requests, problem) &&
         numberField(o, "avg_latency_ms", 0, 1e9, 0, s.avg_latency_ms, problem);
}

// The record a report is kept as in the shared store: its fields and when (wall clock,
// so another replica can tell its age).
std::string nodeRecordJson(const NodeStatus& s) {
  return jsonText(bj::object{
      {"state", nodeStateName(s.state)},
      {"gpu_util", s.gpu_util},
      {"gpu_memory", s.gpu_memory},
      {"active_connections", s.active_connections},
      {"queued_requests", s.queued_requests},
      {"avg_latency_ms", s.avg_latency_ms},
      {"reported_ms", std::chrono::duration_cast<std::chrono::milliseconds>(s.reported_wall.time_since_epoch()).count()}});
}

}  // namespace

NodeTablePtr AdminApi::mergeStoreNodes(const std::vector<StateStore::Record>& records) {
  const auto now = SteadyClock::now();
  const auto wall_now = std::chrono::system_clock::now();
  bool changed = false;
  std::set<std::string, std::less<>> seen;
  for (const auto& r : records) {
    if (!validNodeId(r.id)) continue;
    boost::system::error_code ec;
    bj::value v = readJson(r.json, ec);
    const bj::object* o = ec ? nullptr : v.if_object();
    const bj::value* at = o ? o->if_contains("reported_ms") : nullptr;
    NodeStatus s;
    std::string problem;
    if (!o || !at || !at->is_int64() || !parseNodeStatus(*o, s, problem)) continue;  // not a report: ignored
    s.reported_wall = std::chrono::system_clock::time_point(std::chrono::milliseconds(at->get_int64()));
    const auto age = std::max(wall_now - s.reported_wall, std::chrono::system_clock::duration::zero());
    s.reported = now - std::chrono::duration_cast<SteadyClock::duration>(age);
    seen.insert(r.id);
    auto it = nodes_.find(r.id);
    if (it != nodes_.end() && it->second.reported_wall >= s.reported_wall) continue;  // what we have is as new
    if (it == nodes_.end() && nodes_.size() >= kMaxNodes) continue;
    nodes_[r.id] = s;
    changed = true;
  }
  // Forgotten through another replica: gone from the store, so gone here.
  for (const auto& id : store_nodes_)
    if (!seen.count(id) && nodes_.erase(id)) changed = true;
  store_nodes_ = std::move(seen);
  return changed ? std::make_shared<const NodeTable>(nodes_) : nullptr;
}

void AdminApi::applyOverrides(Config& config) const {
  for (auto& m : config.models)
    if (auto it = canary_overrides_.find(m.name); it != canary_overrides_.end() && m.canary.enabled) m.canary.percent = it->second;
}

asio::awaitable<AdminReply> AdminApi::handle(SnapshotPtr snap, NodeTablePtr nodes, std::string_view method,
                                             std::string_view path, std::string_view authorization,
                                             std::string_view accept, std::string& body) {
  const Config& cfg = *snap->config;
  // The dashboard's page is a shell with no data in it: it loads without a token and
  // asks for one (kept in the browser's sessionStorage) before its data calls, which
  // need it like every admin call.
  if (path == "/admin/dashboard" || path == "/admin/dashboard/") {
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
    co_return AdminReply{200,
                         std::string(dashboardPage()),
                         "text/html; charset=utf-8",
                         {{"Content-Security-Policy", std::string(dashboardContentSecurityPolicy())},
                          {"Referrer-Policy", "no-referrer"}}};
  }
  // The console (src/admin/console/): the same, with its script served apart so that the
  // page's Content-Security-Policy allows no inline script.
  if (path == "/admin/console" || path == "/admin/console/" || path == "/admin/console.js") {
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
    const bool script = path == "/admin/console.js";
    co_return AdminReply{200,
                         std::string(script ? consoleScript() : consolePage()),
                         script ? "text/javascript; charset=utf-8" : "text/html; charset=utf-8",
                         {{"Content-Security-Policy", std::string(consoleContentSecurityPolicy())},
                          {"Referrer-Policy", "no-referrer"}}};
  }
  const std::optional<AdminCaller> who = caller(cfg, authorization);
  // Not in the audit log (anyone could fill it with these); a log line.
  if (!who) {
    log::warn("admin API: a request without a valid token refused", {{"method", method}, {"path", path.substr(0, std::min<std::size_t>(path.find('?'), 300))}});
    co_return adminError(401, "unauthorized", "A valid admin token is required (Authorization: Bearer ...).");
  }
  auto op = route(snap, std::move(nodes), *who, method, path, accept, body);
  AdminReply reply = co_await std::move(op);
  if (AuditLog::recorded(method, reply.status)) {
    auto recorded = audit_log_.record(*who, method, path.substr(0, path.find('?')), reply.status, cfg.admin.audit_entries);
    co_await std::move(recorded);
  }
  co_return reply;
}

asio::awaitable<AdminReply> AdminApi::route(SnapshotPtr snap, NodeTablePtr nodes, const AdminCaller& caller, std::string_view method,
                                            std::string_view path, std::string_view accept, std::string& body) {
  const Config& cfg = *snap->config;
  const AdminCaller* who = &caller;
  constexpr std::string_view kPrefix = "/admin/v1/";
  const std::string_view target = path;  // with its query, which only tenant_admin_ reads
  path = target.substr(0, target.find('?'));
  if (path.substr(0, kPrefix.size()) != kPrefix) co_return adminError(404, "unknown_url", "Unknown admin URL: " + std::string(path));
  const std::string_view rest = path.substr(kPrefix.size());
  if (rest == "whoami") {  // the console names who is signed in
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
    bj::object me{{"name", who->name}, {"full", who->full}};
    if (!who->full) me["tenant"] = who->tenant;
    co_return ok(std::move(me));
  }
  if (rest == "audit") {  // every caller: a tenant token reads its tenant's entries
    const std::size_t q = target.find('?');
    auto op = audit_log_.list(*who, method, q == std::string_view::npos ? std::string_view{} : target.substr(q + 1));
    AdminReply r = co_await std::move(op);
    co_return r;
  }
  auto tenant_op = tenant_admin_.handle(*who, cfg, method, target.substr(kPrefix.size()), body);
  if (auto reply = co_await std::move(tenant_op)) co_return std::move(*reply);
  // The spend ledger's sums and request log: a tenant's token sees its own tenant's.
  auto usage_op = handleUsageAdmin(*who, cfg, method, target.substr(kPrefix.size()), accept);
  if (auto reply = co_await std::move(usage_op)) co_return std::move(*reply);
  // Everything else is the operator's: a tenant's token manages its own keys only.
  if (!who->full) co_return adminError(403, "forbidden", "A tenant token may only manage its tenant's keys.");
  auto resource_op = resource_admin_.handle(*who, method, rest, body);
  if (auto reply = co_await std::move(resource_op)) co_return std::move(*reply);
  auto endpoint_op = endpoint_admin_.handle(*who, cfg, method, rest, body);
  if (auto reply = co_await std::move(endpoint_op)) co_return std::move(*reply);
  auto mcp_op = handleMcpAdmin(host_.store(), tenant_admin_, *who, method, rest);
  if (auto reply = co_await std::move(mcp_op)) co_return std::move(*reply);
  const std::size_t q = target.find('?');
  auto cache_op = handleCacheAdmin(host_.responseCache(), method, rest,
                                   q == std::string_view::npos ? std::string_view{} : target.substr(q + 1));
  if (auto reply = co_await std::move(cache_op)) co_return std::move(*reply);
  const auto now = SteadyClock::now();

  if (rest == "metrics") {
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
    // Awaited into a named local first: GCC 12 may destroy a temporary built around a
    // co_await twice (see attempt_loop.cpp).
    std::string text = co_await host_.renderMetrics();
    co_return AdminReply{200, std::move(text), "text/plain; version=0.0.4; charset=utf-8"};
  }
  if (rest == "config") {
    if (method == "GET") co_return ok(configJson(cfg));
    if (method != "PUT") co_return adminError(405, "method_not_allowed", "Use GET or PUT.");
    auto loaded = loadConfigString(body, "<admin api>");
    if (!loaded.config) {
      host_.countRejectedConfig();
      log::error("config from the admin API rejected; still serving the previous config", {{"error", loaded.error}});
      co_return adminError(400, "invalid_config", loaded.error);
    }
    if (!loaded.config->admin.enabled)
      co_return adminError(400, "invalid_config",
                      "The new config has no usable admin section: applying it would lock the admin API out.");
    ConfigPtr next = loaded.config;
    if (const auto& listen = host_.listenOverride()) {
      auto copy = std::make_shared<Config>(*next);
      copy->listeners = {*listen};
      next = copy;
    }
    std::lock_guard lock(host_.lock());
    if (auto err = host_.publish(next, "admin")) {
      host_.countRejectedConfig();
      co_return adminError(400, "invalid_config", *err);
    }
    bj::array warnings;
    for (const auto& w : loaded.warnings) warnings.push_back(bj::string(w));
    tenant_admin_.audit(*who, "config.publish", "config", "generation " + std::to_string(host_.generation()));
    co_return ok(bj::object{{"generation", host_.generation()}, {"warnings", std::move(warnings)}});
  }

  if (rest == "healing") {
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
    std::string view;
    {
      std::lock_guard lock(host_.lock());
      view = host_.healingJson();
    }
    co_return AdminReply{200, view};
  }

  if (rest == "deployments") {
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
    auto states = co_await host_.collectDeploymentStates(cfg);
    auto draining_op = host_.collectDraining(cfg);
    const std::vector<std::string> draining = co_await std::move(draining_op);
    std::set<std::pair<std::string, std::string>> healed;  // ejected by a self-healing rule
    {
      std::lock_guard lock(host_.lock());
      healed = host_.healingEjected();
    }
    bj::array models;
    for (const auto& m : cfg.models) {
      bj::array ds;
      // Gone from the config, requests still in flight: listed until they finish.
      for (const std::string& key : draining)
        if (key.compare(0, m.name.size() + 1, m.name + "/") == 0) {
          const std::string id = key.substr(m.name.size() + 1);
          bj::object o{{"id", id}, {"source", DeploymentStates::drainingSource(id)}, {"state", "draining"}};
          if (const auto at = id.find('@'); at != std::string::npos) o["address"] = id.substr(at + 1);
          ds.push_back(std::move(o));
        }
      for (const auto& d : m.deployments) {
        bj::object o = deploymentJson(d);
        const DeploymentSummary sum = summarizeDeployment(states, d.index, now);
        o["outstanding"] = sum.outstanding;
        o["requests"] = sum.requests;
        o["failures"] = sum.failures;
        o["latency_ewma_ms"] = sum.ewma_ms;
        // Out of selection by outlier detection (on some worker) or by a self-healing rule.
        const bool by_healing = healed.count({m.name, d.id}) > 0;
        o["ejected"] = sum.ejected || by_healing;
        if (sum.ejected || by_healing) o["ejected_by"] = by_healing ? "self_healing" : "outlier_detection";
        o["throttled"] = sum.throttled;
        o["throttle"] = sum.throttle;
        o["state"] = sum.state(by_healing);
        const bool breaker_on = snap->providers[d.provider_index].config->circuit_breaker.enabled;
        o["breaker"] = !breaker_on
                           ? bj::value(nullptr)
                           : bj::value(bj::object{
                                 {"state", sum.breakers_open ? "open" : sum.breakers_half_open ? "half_open" : "closed"},
                                 {"workers", bj::object{{"closed", sum.breakers_closed},
                                                        {"open", sum.breakers_open},
                                                        {"half_open", sum.breakers_half_open}}}});
        if (const NodeStatus* st = liveStatus(nodes.get(), d.node, m.gpu, now)) {
          bj::object n = nodeJson(*st, now);
          const double score = loadScore(*st, m.gpu);
          n["score"] = std::isfinite(score) ? bj::value(score) : bj::value(nullptr);
          n["eligible"] = score <= m.gpu.eject_score;
          o["node_status"] = std::move(n);
        } else {
          o["node_status"] = nullptr;
        }
        ds.push_back(std::move(o));
      }
      models.push_back(bj::object{{"name", m.name},
                                  {"balancing", balancePolicyName(m.balancing)},
                                  {"canary", canaryJson(m.canary)},
                                  {"deployments", std::move(ds)}});
    }
    co_return ok(bj::object{{"generation", cfg.generation}, {"models", std::move(models)}});
  }

  if (rest.substr(0, 7) == "models/" && rest.size() > 14 && rest.substr(rest.size() - 7) == "/canary") {
    if (method != "PUT") co_return adminError(405, "method_not_allowed", "Use PUT.");
    const std::string model(rest.substr(7, rest.size() - 14));
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    double percent = 0;
    std::string problem;
    if (ec || !v.is_object() || !v.get_object().contains("percent") ||
        !numberField(v.get_object(), "percent", 0, 100, 0, percent, problem))
      co_return adminError(400, "invalid_request", problem.empty() ? "Body must be {\"percent\": 0..100}." : problem);
    std::lock_guard lock(host_.lock());
    const ModelConfig* m = host_.baseConfig()->findModel(model);
    if (!m) co_return adminError(404, "model_not_found", "No model '" + model + "' in the active config.");
    if (!m->canary.enabled) co_return adminError(400, "no_canary", "Model '" + model + "' has no canary section in its config.");
    canary_overrides_[model] = percent;
    if (auto err = host_.publish(nullptr, "admin canary")) co_return adminError(500, "internal_error", *err);
    log::info("canary weight changed", {{"model", model}, {"percent", percent}, {"generation", host_.generation()}});
    tenant_admin_.audit(*who, "canary.set", model, "percent " + std::to_string(percent));
    co_return ok(bj::object{{"model", model}, {"percent", percent}, {"generation", host_.generation()}});
  }

  if (rest == "nodes") {
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET.");
    bj::object out;
    std::lock_guard lock(host_.lock());
    for (const auto& [id, s] : nodes_) out[id] = nodeJson(s, now);
    co_return ok(bj::object{{"nodes", std::move(out)}});
  }

  if (rest.substr(0, 6) == "nodes/" && rest.size() > 13 && rest.substr(rest.size() - 7) == "/status") {
    const std::string id(rest.substr(6, rest.size() - 13));
    if (!validNodeId(id)) co_return adminError(400, "invalid_request", "Node ids are 1-128 characters of [A-Za-z0-9._:-].");
    if (method == "DELETE") {
      {
        std::lock_guard lock(host_.lock());
        nodes_.erase(id);
        host_.publishNodes(std::make_shared<const NodeTable>(nodes_));
      }
      bool shared = false;
      if (host_.store().stats().shared) {  // every replica forgets it
        auto erased = admin_store::erase(host_.store(), StateStore::kNamespaces[3], id);
        shared = !(co_await std::move(erased));
      }
      tenant_admin_.audit(*who, "node.forget", id);
      co_return ok(bj::object{{"node", id}, {"deleted", true}, {"shared", shared}});
    }
    if (method != "PUT") co_return adminError(405, "method_not_allowed", "Use PUT or DELETE.");
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (ec || !v.is_object()) co_return adminError(400, "invalid_json", "The body must be a JSON object.");
    NodeStatus s;
    std::string problem;
    if (!parseNodeStatus(v.get_object(), s, problem)) co_return adminError(400, "invalid_request", problem);
    s.reported = now;
    s.reported_wall = std::chrono::system_clock::now();
    {
      std::lock_guard lock(host_.lock());
      if (!nodes_.count(id) && nodes_.size() >= kMaxNodes)
        co_return adminError(429, "too_many_nodes", "The node table is full (" + std::to_string(kMaxNodes) + " nodes).");
      nodes_[id] = s;
      host_.publishNodes(std::make_shared<const NodeTable>(nodes_));
    }
    // With a shared store the report is written once, for every replica (S3's
    // ai_node_status): a reporter need not know the replicas. In force here already.
    bool shared = false;
    if (host_.store().stats().shared) {
      auto written = admin_store::put(host_.store(), StateStore::kNamespaces[3], id, nodeRecordJson(s));
      const auto failure = co_await std::move(written);
      shared = !failure;
      if (failure) log::warn("node status not written to the shared store; in force on this replica only", {{"node", id}, {"error", *failure}});
      std::lock_guard lock(host_.lock());
      if (shared) store_nodes_.insert(id);  // in the store now: forgotten here when another replica forgets it
    }
    co_return ok(bj::object{{"node", id}, {"status", nodeJson(s, now)}, {"shared", shared}});
  }

  if (rest == "drain") {
    if (method != "POST") co_return adminError(405, "method_not_allowed", "Use POST.");
    log::info("drain requested through the admin API");
    tenant_admin_.audit(*who, "drain", "gateway");
    ::kill(::getpid(), SIGTERM);  // the same path as an orchestrator's SIGTERM
    co_return ok(bj::object{{"draining", true}});
  }

  co_return adminError(404, "unknown_url", "Unknown admin URL: " + std::string(path));
}

}  // namespace tahua
