#include "admin/tenant_admin.h"
#include "admin/admin_error.h"
#include "admin/store_writes.h"

#include <openssl/rand.h>

#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <functional>

#include "core/json_read.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/utc_time.h"
#include "limits/limit_plan.h"

namespace tahua {
namespace asio = boost::asio;
namespace bj = boost::json;

namespace {

std::int64_t nowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

using admin_store::await;
using admin_store::erase;
using admin_store::put;
using admin_store::WriteResult;

// Each limit of a plan with what is left of it now.
asio::awaitable<bj::array> usage(StateStore& store, const LimitPlan& plan) {
  auto checks = std::make_shared<std::vector<LimitCheck>>();
  for (const auto& p : plan) checks->push_back(LimitCheck{p.key, p.spec, 0});
  std::function<void(std::function<void(Admission)>)> start = [&store, checks](std::function<void(Admission)> done) {
    store.peek(*checks, [done = std::move(done)](const Admission& x) { done(x); });
  };
  auto op = await<Admission>(std::move(start));
  const Admission a = co_await std::move(op);
  bj::array out;
  for (std::size_t i = 0; i < plan.size() && i < a.count; ++i) {
    const PlannedLimit& p = plan[i];
    const LimitDecision& d = a.decisions[i];
    const bool usd = p.unit == LimitUnit::MicroUsd;
    auto amount = [&](std::int64_t v) -> bj::value {
      if (usd) return static_cast<double>(v) / 1e6;
      return v;
    };
    out.push_back(bj::object{{"scope", p.scope},
                             {"limit", p.limit},
                             {"max", amount(p.spec.limit)},
                             {"used", amount(std::max<std::int64_t>(0, p.spec.limit - d.remaining))},
                             {"remaining", amount(d.remaining)},
                             {"resets_in_ms", d.reset_ms}});
  }
  co_return out;
}

std::string secretKey() {
  unsigned char raw[24];
  RAND_bytes(raw, sizeof raw);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "tk-";
  for (unsigned char c : raw) {
    s += kHex[c >> 4];
    s += kHex[c & 15];
  }
  return s;
}

bj::value parsed(const std::string& json) { return bj::parse(json); }

// An update's summary for the audit log: the fields it sent, never their values (a key's
// metadata may hold anything).
std::string fieldsSent(const std::string& body) {
  boost::system::error_code ec;
  bj::value v = readJson(body, ec);
  if (ec || !v.is_object()) return {};
  std::string out = "fields:";
  for (const auto& [k, _] : v.get_object()) {
    if (out.size() > 200) return out + " ...";
    out.append(" ").append(k.data(), k.size());
  }
  return out;
}

}  // namespace

void TenantAdmin::audit(const AdminCaller& caller, std::string_view action, std::string_view target, std::string_view detail,
                        std::string_view tenant) {
  caller.note = AuditNote{std::string(action), std::string(target), std::string(detail), std::string(tenant)};
}

asio::awaitable<std::optional<AdminReply>> TenantAdmin::handle(const AdminCaller& caller, const Config& config,
                                                               std::string_view method, std::string_view rest,
                                                               const std::string& body) {
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  auto split = [&](std::string_view base) -> std::optional<std::string_view> {
    if (rest == base) return std::string_view{};
    if (rest.size() > base.size() + 1 && rest.substr(0, base.size()) == base && rest[base.size()] == '/')
      return rest.substr(base.size() + 1);
    return std::nullopt;
  };
  if (auto name = split("tenants")) {
    auto op = tenants(caller, config, method, *name, body);
    AdminReply r = co_await std::move(op);
    co_return r;
  }
  if (auto name = split("keys")) {
    auto op = keys(caller, config, method, *name, query, body);
    AdminReply r = co_await std::move(op);
    co_return r;
  }
  co_return std::nullopt;
}

asio::awaitable<AdminReply> TenantAdmin::tenants(const AdminCaller& caller, const Config& config, std::string_view method,
                                                 std::string_view name, const std::string& body) {
  const TenantDirectoryPtr dir = host_.tenants();
  if (name.empty()) {
    if (method == "GET") {
      bj::array list;
      for (const auto& t : dir->tenants)
        if (caller.full || t.name == caller.tenant) list.push_back(parsed(tenantToJson(t)));
      co_return AdminReply{200, jsonText(bj::object{{"tenants", std::move(list)}})};
    }
    if (method != "POST") co_return adminError(405, "method_not_allowed", "Use GET or POST.");
    if (!caller.full) co_return adminError(403, "forbidden", "Only the admin token may create tenants.");
    TenantConfig t;
    if (auto e = tenantFromJson(body, config, t, false)) co_return adminError(400, "invalid_request", *e);
    if (dir->tenant(t.name)) co_return adminError(409, "conflict", "A tenant named '" + t.name + "' exists.");
    t.from_store = true;
    t.created_at = nowSeconds();
    t.created_by = caller.name;
    auto write = put(host_.store(), kTenantRecords, t.name, tenantToJson(t));
    if (auto e = co_await std::move(write)) co_return adminError(503, "store_unavailable", *e);
    auto published = host_.publishTenants();
    co_await std::move(published);
    audit(caller, "tenant.create", t.name, {}, t.name);
    co_return AdminReply{201, tenantToJson(t)};
  }

  const TenantConfig* t = dir->tenant(name);
  if (!t || (!caller.full && caller.tenant != name)) co_return adminError(404, "not_found", "No tenant '" + std::string(name) + "'.");
  if (method == "GET") {
    LimitPlan plan = tenantLimits(*t);
    for (const auto& [model, limits] : t->model_limits) {
      LimitPlan more = tenantModelLimits(*t, model, limits);
      plan.insert(plan.end(), more.begin(), more.end());
    }
    bj::value v = parsed(tenantToJson(*t));
    auto used = usage(host_.store(), plan);
    v.as_object()["usage"] = co_await std::move(used);
    co_return AdminReply{200, jsonText(v)};
  }
  if (!caller.full) co_return adminError(403, "forbidden", "Only the admin token may change a tenant.");
  if (!t->from_store)
    co_return adminError(409, "declared_in_config", "Tenant '" + t->name + "' is declared in the config file; change it there.");
  if (method == "PATCH") {
    TenantConfig next = *t;
    if (auto e = tenantFromJson(body, config, next, true)) co_return adminError(400, "invalid_request", *e);
    auto write = put(host_.store(), kTenantRecords, next.name, tenantToJson(next));
    if (auto e = co_await std::move(write)) co_return adminError(503, "store_unavailable", *e);
    auto published = host_.publishTenants();
    co_await std::move(published);
    audit(caller, "tenant.update", next.name, fieldsSent(body), next.name);
    co_return AdminReply{200, tenantToJson(next)};
  }
  if (method == "DELETE") {
    for (const auto& k : dir->keys)
      if (k.tenant == t->name) co_return adminError(409, "tenant_has_keys", "Revoke tenant '" + t->name + "''s keys first.");
    const std::string tenant_name = t->name;
    auto write = erase(host_.store(), kTenantRecords, tenant_name);
    if (auto e = co_await std::move(write)) co_return adminError(503, "store_unavailable", *e);
    auto published = host_.publishTenants();
    co_await std::move(published);
    audit(caller, "tenant.delete", tenant_name, {}, tenant_name);
    co_return AdminReply{200, jsonText(bj::object{{"deleted", tenant_name}})};
  }
  co_return adminError(405, "method_not_allowed", "Use GET, PATCH or DELETE.");
}

asio::awaitable<AdminReply> TenantAdmin::keys(const AdminCaller& caller, const Config& config, std::string_view method,
                                              std::string_view name, std::string_view query, const std::string& body) {
  const TenantDirectoryPtr dir = host_.tenants();
  if (name.empty()) {
    if (method == "GET") {
      std::string_view only = caller.full ? std::string_view{} : std::string_view(caller.tenant);
      if (query.substr(0, 7) == "tenant=") {
        const std::string_view asked = query.substr(7);
        if (!only.empty() && asked != only) co_return adminError(403, "forbidden", "A tenant token lists its own tenant's keys only.");
        only = asked;
      }
      bj::array list;
      for (const auto& k : dir->keys)
        if (only.empty() || k.tenant == only) {
          bj::value v = parsed(keyToJson(k));
          v.as_object().erase("sha256");  // not a secret, but no one needs it from here
          list.push_back(std::move(v));
        }
      co_return AdminReply{200, jsonText(bj::object{{"keys", std::move(list)}})};
    }
    if (method != "POST") co_return adminError(405, "method_not_allowed", "Use GET or POST.");
    ApiKeyConfig k;
    if (auto e = keyFromJson(body, config, k, false)) co_return adminError(400, "invalid_request", *e);
    if (!caller.full && k.tenant != caller.tenant)
      co_return adminError(403, "forbidden", "A tenant token creates keys of its own tenant only.");
    const TenantConfig* tenant = dir->tenant(k.tenant);
    if (!tenant) co_return adminError(400, "invalid_request", "tenant: unknown tenant '" + k.tenant + "'");
    for (const auto& m : k.models) {
      bool allowed = tenant->models.empty();
      for (const auto& tm : tenant->models) allowed = allowed || tm == m;
      if (!allowed) co_return adminError(400, "invalid_request", "models: '" + m + "' is not among tenant '" + k.tenant + "''s models");
    }
    if (dir->key(k.name)) co_return adminError(409, "conflict", "A key named '" + k.name + "' exists.");
    std::string secret;
    if (k.sha256 == Sha256{}) {
      secret = secretKey();
      k.sha256 = sha256(secret);
      if (k.prefix.empty()) k.prefix = secret.substr(0, 11);
    }
    for (const auto& other : dir->keys)
      if (other.sha256 == k.sha256) co_return adminError(409, "conflict", "That key exists already.");
    k.from_store = true;
    k.created_at = nowSeconds();
    k.created_by = caller.name;
    auto write = put(host_.store(), kKeyRecords, k.name, keyToJson(k));
    if (auto e = co_await std::move(write)) co_return adminError(503, "store_unavailable", *e);
    auto published = host_.publishTenants();
    co_await std::move(published);
    audit(caller, "key.create", k.name, "tenant " + k.tenant, k.tenant);
    bj::value v = parsed(keyToJson(k));
    v.as_object().erase("sha256");
    if (!secret.empty()) v.as_object()["key"] = secret;  // the only time it is ever shown
    co_return AdminReply{201, jsonText(v)};
  }

  const ApiKeyConfig* k = dir->key(name);
  if (!k || (!caller.full && caller.tenant != k->tenant)) co_return adminError(404, "not_found", "No key '" + std::string(name) + "'.");
  if (method == "GET") {
    bj::value v = parsed(keyToJson(*k));
    v.as_object().erase("sha256");
    const LimitPlan plan = keyLimits(*k);
    auto used = usage(host_.store(), plan);
    v.as_object()["usage"] = co_await std::move(used);
    co_return AdminReply{200, jsonText(v)};
  }
  if (!k->from_store)
    co_return adminError(409, "declared_in_config", "Key '" + k->name + "' is declared in the config file; change it there.");
  if (method == "PATCH") {
    ApiKeyConfig next = *k;
    if (auto e = keyFromJson(body, config, next, true)) co_return adminError(400, "invalid_request", *e);
    auto write = put(host_.store(), kKeyRecords, next.name, keyToJson(next));
    if (auto e = co_await std::move(write)) co_return adminError(503, "store_unavailable", *e);
    auto published = host_.publishTenants();
    co_await std::move(published);
    audit(caller, "key.update", next.name, fieldsSent(body), next.tenant);
    bj::value v = parsed(keyToJson(next));
    v.as_object().erase("sha256");
    co_return AdminReply{200, jsonText(v)};
  }
  if (method == "DELETE") {
    const std::string key_name = k->name;
    auto write = erase(host_.store(), kKeyRecords, key_name);
    if (auto e = co_await std::move(write)) co_return adminError(503, "store_unavailable", *e);
    auto published = host_.publishTenants();
    co_await std::move(published);
    audit(caller, "key.revoke", key_name, {}, k->tenant);
    co_return AdminReply{200, jsonText(bj::object{{"revoked", key_name}})};
  }
  co_return adminError(405, "method_not_allowed", "Use GET, PATCH or DELETE.");
}

}  // namespace tahua
