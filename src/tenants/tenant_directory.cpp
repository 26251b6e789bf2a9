#include "tenants/tenant_directory.h"

#include <boost/json.hpp>
#include <cctype>
#include <cmath>
#include <set>

#include "core/json_read.h"
#include "core/sha256.h"
#include "core/utc_time.h"

namespace tahua {
namespace bj = boost::json;

namespace {

constexpr std::string_view kLimitNames[] = {"requests_per_minute", "tokens_per_minute",       "tokens_per_day",
                                            "tokens_per_month",    "usd_per_day",             "usd_per_month",
                                            "max_concurrent_requests", "max_concurrent_streams"};

bj::object limitsJson(const LimitSet& l) {
  bj::object o;
  if (l.requests_per_minute) o["requests_per_minute"] = l.requests_per_minute;
  if (l.tokens_per_minute) o["tokens_per_minute"] = l.tokens_per_minute;
  if (l.tokens_per_day) o["tokens_per_day"] = l.tokens_per_day;
  if (l.tokens_per_month) o["tokens_per_month"] = l.tokens_per_month;
  if (l.usd_per_day > 0) o["usd_per_day"] = l.usd_per_day;
  if (l.usd_per_month > 0) o["usd_per_month"] = l.usd_per_month;
  if (l.max_concurrent_requests) o["max_concurrent_requests"] = l.max_concurrent_requests;
  if (l.max_concurrent_streams) o["max_concurrent_streams"] = l.max_concurrent_streams;
  return o;
}

std::optional<std::string> readLimits(const bj::value& v, const std::string& field, LimitSet& out) {
  const bj::object* o = v.if_object();
  if (!o) return field + ": expected an object of limits";
  for (const auto& [k, val] : *o) {
    bool known = false;
    for (auto n : kLimitNames) known = known || k == n;
    if (!known)
      return field + "." + std::string(k) +
             ": unknown limit (requests_per_minute, tokens_per_minute, tokens_per_day, tokens_per_month, usd_per_day, "
             "usd_per_month, max_concurrent_requests, max_concurrent_streams)";
    const std::string f = field + "." + std::string(k);
    // null or 0 removes the limit.
    if (val.is_null()) continue;
    if (k.starts_with("usd_")) {
      if (!val.is_number() || !(val.to_number<double>() >= 0) || val.to_number<double>() > 1e9) return f + ": expected a USD amount >= 0";
      (k == "usd_per_day" ? out.usd_per_day : out.usd_per_month) = val.to_number<double>();
      continue;
    }
    if (!val.is_int64() && !val.is_uint64()) return f + ": expected a whole number";
    const std::int64_t n = val.is_int64() ? val.as_int64() : static_cast<std::int64_t>(val.as_uint64());
    if (n < 0 || n > 1'000'000'000'000) return f + ": expected 0 to 10^12 (0: no limit)";
    if (k == "requests_per_minute") out.requests_per_minute = n;
    else if (k == "tokens_per_minute") out.tokens_per_minute = n;
    else if (k == "tokens_per_day") out.tokens_per_day = n;
    else if (k == "tokens_per_month") out.tokens_per_month = n;
    else if (k == "max_concurrent_requests") out.max_concurrent_requests = n;
    else out.max_concurrent_streams = n;
  }
  return std::nullopt;
}

std::optional<std::string> readModels(const bj::value& v, const std::string& field, const Config& config,
                                      std::vector<std::string>& out) {
  const bj::array* a = v.if_array();
  if (!a) return field + ": expected a list of model names";
  out.clear();
  for (std::size_t i = 0; i < a->size(); ++i) {
    const bj::string* s = (*a)[i].if_string();
    if (!s) return field + "[" + std::to_string(i) + "]: expected a model name";
    if (!config.findModel(*s)) return field + "[" + std::to_string(i) + "]: unknown model \"" + std::string(*s) + "\"";
    out.emplace_back(*s);
  }
  return std::nullopt;
}

bool validName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

std::optional<std::string> checkKeys(const bj::object& o, std::initializer_list<std::string_view> allowed) {
  for (const auto& [k, v] : o) {
    bool ok = false;
    for (auto a : allowed) ok = ok || k == a;
    if (!ok) return std::string(k) + ": unknown field";
  }
  return std::nullopt;
}

}  // namespace

const TenantConfig* TenantDirectory::tenant(std::string_view name) const {
  for (const auto& t : tenants)
    if (t.name == name) return &t;
  return nullptr;
}

const ApiKeyConfig* TenantDirectory::key(std::string_view name) const {
  for (const auto& k : keys)
    if (k.name == name) return &k;
  return nullptr;
}

std::string tenantToJson(const TenantConfig& t) {
  bj::object o{{"name", t.name}, {"models", bj::value_from(t.models)}, {"limits", limitsJson(t.limits)}};
  bj::object ml;
  for (const auto& [m, l] : t.model_limits) ml[m] = limitsJson(l);
  o["model_limits"] = std::move(ml);
  o["source"] = t.from_store ? "admin" : "config";
  if (t.created_at) o["created_at"] = formatUtcTime(t.created_at);
  if (!t.created_by.empty()) o["created_by"] = t.created_by;
  return bj::serialize(o);
}

std::string keyToJson(const ApiKeyConfig& k) {
  bj::object meta;
  for (const auto& [n, v] : k.metadata) meta[n] = v;
  bj::object o{{"name", k.name},     {"tenant", k.tenant},          {"prefix", k.prefix},
               {"sha256", toHex(k.sha256)}, {"models", bj::value_from(k.models)}, {"limits", limitsJson(k.limits)},
               {"metadata", std::move(meta)}};
  if (k.expires_at) o["expires_at"] = formatUtcTime(k.expires_at);
  o["source"] = k.from_store ? "admin" : "config";
  if (k.created_at) o["created_at"] = formatUtcTime(k.created_at);
  if (!k.created_by.empty()) o["created_by"] = k.created_by;
  return bj::serialize(o);
}

std::optional<std::string> tenantFromJson(std::string_view json, const Config& config, TenantConfig& out, bool partial) {
  boost::system::error_code ec;
  bj::value v = readJson(json, ec);
  if (ec || !v.is_object()) return std::string("the body must be a JSON object");
  const bj::object& o = v.as_object();
  if (auto e = checkKeys(o, {"name", "models", "limits", "model_limits", "source", "created_at", "created_by"})) return e;
  if (!partial) {
    const bj::string* name = o.contains("name") ? o.at("name").if_string() : nullptr;
    if (!name || !validName(*name)) return std::string("name: required; 1-64 letters, digits, '-', '_' or '.'");
    out.name = std::string(*name);
  } else if (const bj::value* n = o.if_contains("name"); n && !(n->is_string() && n->as_string() == out.name)) {
    return std::string("name: cannot be changed (create a new tenant)");
  }
  if (auto* m = o.if_contains("models"))
    if (auto e = readModels(*m, "models", config, out.models)) return e;
  if (auto* l = o.if_contains("limits"))
    if (auto e = readLimits(*l, "limits", out.limits)) return e;
  if (auto* ml = o.if_contains("model_limits")) {
    if (!ml->is_object()) return std::string("model_limits: expected an object of model name to limits");
    out.model_limits.clear();
    for (const auto& [model, l] : ml->as_object()) {
      if (!config.findModel(model)) return "model_limits." + std::string(model) + ": unknown model";
      LimitSet set;
      if (auto e = readLimits(l, "model_limits." + std::string(model), set)) return e;
      out.model_limits.emplace_back(std::string(model), set);
    }
  }
  if (auto* c = o.if_contains("created_at"); c && c->is_string()) out.created_at = parseUtcTime(c->as_string());
  if (auto* c = o.if_contains("created_by"); c && c->is_string()) out.created_by = std::string(c->as_string());
  return std::nullopt;
}

std::optional<std::string> keyFromJson(std::string_view json, const Config& config, ApiKeyConfig& out, bool partial) {
  boost::system::error_code ec;
  bj::value v = readJson(json, ec);
  if (ec || !v.is_object()) return std::string("the body must be a JSON object");
  const bj::object& o = v.as_object();
  if (auto e = checkKeys(o, {"name", "tenant", "sha256", "prefix", "models", "expires_at", "limits", "metadata", "source",
                             "created_at", "created_by"}))
    return e;
  if (!partial) {
    const bj::string* name = o.contains("name") ? o.at("name").if_string() : nullptr;
    if (!name || !validName(*name)) return std::string("name: required; 1-64 letters, digits, '-', '_' or '.'");
    out.name = std::string(*name);
    const bj::string* tenant = o.contains("tenant") ? o.at("tenant").if_string() : nullptr;
    if (!tenant || tenant->empty()) return std::string("tenant: required");
    out.tenant = std::string(*tenant);
    if (auto* h = o.if_contains("sha256")) {
      const bj::string* hex = h->if_string();
      bool ok = hex && hex->size() == 64;
      for (std::size_t i = 0; ok && i < 32; ++i) {
        unsigned byte = 0;
        ok = std::sscanf(hex->c_str() + 2 * i, "%2x", &byte) == 1 && std::isxdigit(static_cast<unsigned char>((*hex)[2 * i])) &&
             std::isxdigit(static_cast<unsigned char>((*hex)[2 * i + 1]));
        out.sha256[i] = static_cast<unsigned char>(byte);
      }
      if (!ok) return std::string("sha256: expected 64 hex digits (the key's SHA-256, never the key)");
    }
    if (auto* p = o.if_contains("prefix")) {
      if (!p->is_string() || p->as_string().size() > 12) return std::string("prefix: at most 12 characters");
      out.prefix = std::string(p->as_string());
    }
  } else {
    // An update may send the whole record back; what identifies the key must not change.
    for (auto [field, current] : {std::pair<std::string_view, std::string>{"name", out.name}, {"tenant", out.tenant},
                                  {"prefix", out.prefix}, {"sha256", toHex(out.sha256)}}) {
      const bj::value* v = o.if_contains(field);
      if (v && !(v->is_string() && v->as_string() == current))
        return std::string(field) + ": cannot be changed (create a new key and revoke this one)";
    }
  }
  if (auto* m = o.if_contains("models"))
    if (auto e = readModels(*m, "models", config, out.models)) return e;
  if (auto* l = o.if_contains("limits"))
    if (auto e = readLimits(*l, "limits", out.limits)) return e;
  if (auto* x = o.if_contains("expires_at")) {
    if (x->is_null()) out.expires_at = 0;
    else if (x->is_string() && parseUtcTime(x->as_string()) >= 0) out.expires_at = parseUtcTime(x->as_string());
    else if (x->is_int64() && x->as_int64() > 0) out.expires_at = x->as_int64();
    else return std::string("expires_at: expected a UTC time such as 2027-01-31T00:00:00Z, or null");
  }
  if (auto* m = o.if_contains("metadata")) {
    if (!m->is_object() || m->as_object().size() > 32) return std::string("metadata: expected an object of at most 32 text values");
    out.metadata.clear();
    for (const auto& [n, val] : m->as_object()) {
      if (!val.is_string() || val.as_string().size() > 256 || n.size() > 64)
        return "metadata." + std::string(n) + ": expected text of at most 256 characters";
      out.metadata.emplace_back(std::string(n), std::string(val.as_string()));
    }
  }
  if (auto* c = o.if_contains("created_at"); c && c->is_string()) out.created_at = parseUtcTime(c->as_string());
  if (auto* c = o.if_contains("created_by"); c && c->is_string()) out.created_by = std::string(c->as_string());
  return std::nullopt;
}

TenantDirectoryPtr buildTenantDirectory(const Config& config, const std::vector<StateStore::Record>& tenant_records,
                                        const std::vector<StateStore::Record>& key_records, std::vector<std::string>& notes) {
  auto dir = std::make_shared<TenantDirectory>();
  dir->tenants = config.tenants;
  dir->keys = config.keys;
  std::set<std::string, std::less<>> tenant_names, key_names;
  std::set<Sha256> digests;
  for (const auto& t : dir->tenants) tenant_names.insert(t.name);
  for (const auto& k : dir->keys) {
    key_names.insert(k.name);
    digests.insert(k.sha256);
  }
  for (const auto& r : tenant_records) {
    TenantConfig t;
    if (auto e = tenantFromJson(r.json, config, t, false)) {
      notes.push_back("tenant record \"" + r.id + "\" ignored: " + *e);
      continue;
    }
    if (!tenant_names.insert(t.name).second) {
      notes.push_back("tenant record \"" + r.id + "\" ignored: the config file declares a tenant of that name");
      continue;
    }
    t.from_store = true;
    dir->tenants.push_back(std::move(t));
  }
  for (const auto& r : key_records) {
    ApiKeyConfig k;
    if (auto e = keyFromJson(r.json, config, k, false)) {
      notes.push_back("key record \"" + r.id + "\" ignored: " + *e);
      continue;
    }
    if (!tenant_names.contains(k.tenant)) {
      notes.push_back("key record \"" + r.id + "\" ignored: its tenant \"" + k.tenant + "\" is not known");
      continue;
    }
    if (key_names.contains(k.name) || !digests.insert(k.sha256).second) {
      notes.push_back("key record \"" + r.id + "\" ignored: the config file declares that key or its name");
      continue;
    }
    key_names.insert(k.name);
    k.from_store = true;
    dir->keys.push_back(std::move(k));
  }
  return dir;
}

}  // namespace tahua
