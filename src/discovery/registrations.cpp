#include "discovery/registrations.h"

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>

#include "core/duration.h"
#include "core/json_read.h"

namespace tahua {

namespace bj = boost::json;

namespace {

constexpr Millis kDefaultTtl{30'000};
constexpr Millis kMinTtl{1'000};
constexpr Millis kMaxTtl{3'600'000};
constexpr std::size_t kMaxLabels = 32;

bool validAddress(std::string_view a) {
  const auto colon = a.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == a.size() || a.size() > 300) return false;
  unsigned port = 0;
  const std::string_view p = a.substr(colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc{} || end != p.data() + p.size() || port == 0 || port > 65535) return false;
  const std::string_view host = a.substr(0, colon);
  return std::all_of(host.begin(), host.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == ':' ||
           c == '[' || c == ']';
  });
}

std::string text(const bj::object& o, std::string_view key) {
  const bj::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

}  // namespace

std::optional<std::string> registrationFromJson(std::string_view json, const Config& config, std::string model, std::string id,
                                                std::chrono::system_clock::time_point now, Registration& out) {
  boost::system::error_code ec;
  bj::value v = readJson(json, ec);
  if (ec || !v.is_object()) return "the body must be a JSON object";
  const bj::object& o = v.get_object();
  for (const auto& kv : o)
    if (kv.key() != "address" && kv.key() != "provider" && kv.key() != "upstream_model" && kv.key() != "version" &&
        kv.key() != "labels" && kv.key() != "weight" && kv.key() != "ttl")
      return "unknown field \"" + std::string(kv.key()) + "\" (address, provider, upstream_model, version, labels, weight, ttl)";
  const ModelConfig* m = config.findModel(model);
  if (!m) return "no model \"" + model + "\"";
  out.model = std::move(model);
  out.id = std::move(id);
  out.address = text(o, "address");
  if (!validAddress(out.address)) return "address must be host:port (e.g. 10.0.3.7:8000)";
  out.provider = text(o, "provider");
  if (out.provider.empty()) out.provider = m->deployments.front().provider;
  if (std::none_of(config.providers.begin(), config.providers.end(), [&](const ProviderConfig& p) { return p.name == out.provider; }))
    return "no provider \"" + out.provider + "\"";
  out.upstream_model = text(o, "upstream_model");
  if (out.upstream_model.empty()) out.upstream_model = m->deployments.front().upstream_model;
  if (const bj::value* ver = o.if_contains("version")) {
    if (!ver->is_string() || ver->get_string().empty()) return "version must be a non-empty string";
    out.version = std::string(ver->get_string());
  }
  if (const bj::value* l = o.if_contains("labels")) {
    if (!l->is_object() || l->get_object().size() > kMaxLabels) return "labels must be an object of at most 32 strings";
    for (const auto& kv : l->get_object()) {
      if (!kv.value().is_string()) return "labels must be an object of strings";
      out.labels.emplace_back(std::string(kv.key()), std::string(kv.value().get_string()));
    }
  }
  if (const bj::value* w = o.if_contains("weight")) {
    if (!w->is_int64() || w->get_int64() < 0 || w->get_int64() > 1'000'000) return "weight must be an integer 0..1000000";
    out.weight = static_cast<std::uint32_t>(w->get_int64());
  }
  Millis ttl = kDefaultTtl;
  if (const bj::value* t = o.if_contains("ttl")) {
    const auto parsed = t->is_string() ? parseDuration(t->get_string()) : std::nullopt;
    if (!parsed || *parsed < kMinTtl || *parsed > kMaxTtl) return "ttl must be a duration from 1s to 1h (e.g. \"30s\")";
    ttl = *parsed;
  }
  out.expires = now + ttl;
  return std::nullopt;
}

std::string registrationToJson(const Registration& r) {
  bj::object labels;
  for (const auto& [k, v] : r.labels) labels[k] = v;
  return bj::serialize(bj::object{
      {"model", r.model},
      {"id", r.id},
      {"address", r.address},
      {"provider", r.provider},
      {"upstream_model", r.upstream_model},
      {"version", r.version},
      {"labels", std::move(labels)},
      {"weight", r.weight},
      {"expires_ms", std::chrono::duration_cast<std::chrono::milliseconds>(r.expires.time_since_epoch()).count()}});
}

std::optional<Registration> registrationFromRecord(std::string_view id, std::string_view json) {
  boost::system::error_code ec;
  bj::value v = readJson(json, ec);
  const bj::object* o = ec ? nullptr : v.if_object();
  if (!o) return std::nullopt;
  Registration r;
  r.model = text(*o, "model");
  r.id = text(*o, "id");
  r.address = text(*o, "address");
  r.provider = text(*o, "provider");
  r.upstream_model = text(*o, "upstream_model");
  r.version = text(*o, "version");
  const bj::value* w = o->if_contains("weight");
  const bj::value* e = o->if_contains("expires_ms");
  if (r.model.empty() || r.id.empty() || r.model + "/" + r.id != id || !validAddress(r.address) || r.provider.empty() ||
      r.version.empty() || !w || !w->is_int64() || w->get_int64() < 0 || w->get_int64() > 1'000'000 || !e || !e->is_int64())
    return std::nullopt;
  r.weight = static_cast<std::uint32_t>(w->get_int64());
  r.expires = std::chrono::system_clock::time_point(std::chrono::milliseconds(e->get_int64()));
  if (const bj::value* l = o->if_contains("labels"); l && l->is_object())
    for (const auto& kv : l->get_object())
      if (kv.value().is_string() && r.labels.size() < kMaxLabels) r.labels.emplace_back(std::string(kv.key()), std::string(kv.value().get_string()));
  return r;
}

std::optional<std::chrono::system_clock::time_point> addRegistrations(Config& config, const std::vector<Registration>& list,
                                                                      std::chrono::system_clock::time_point now) {
  std::optional<std::chrono::system_clock::time_point> next;
  bool any = false;
  for (const Registration& r : list) {
    if (r.expires <= now) continue;
    const auto mi = config.model_index.find(r.model);
    if (mi == config.model_index.end()) continue;
    ModelConfig& m = config.models[mi->second];
    if (std::any_of(m.deployments.begin(), m.deployments.end(), [&](const DeploymentConfig& d) { return d.id == r.id; })) continue;
    const auto pi = std::find_if(config.providers.begin(), config.providers.end(), [&](const ProviderConfig& p) { return p.name == r.provider; });
    if (pi == config.providers.end()) continue;
    DeploymentConfig d;
    d.id = r.id;
    d.provider = r.provider;
    d.provider_index = static_cast<std::size_t>(pi - config.providers.begin());
    d.upstream_model = r.upstream_model;
    d.version = r.version;
    d.labels = r.labels;
    d.weight = r.weight;
    d.address = r.address;
    d.node = r.id;  // its status reports use its id
    d.source = "registration";
    m.deployments.push_back(std::move(d));
    markCanaryDeployments(m);
    any = true;
    next = next ? std::min(*next, r.expires) : r.expires;
  }
  if (any) numberDeployments(config);
  return next;
}

}  // namespace tahua
