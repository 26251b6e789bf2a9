// models: deployments, balancing, canary, outlier ejection, GPU scoring, pricing and
// fallbacks.
#include <algorithm>
#include <cctype>

#include "config/loader_detail.h"

namespace tahua::config_detail {

constexpr Named<BalancePolicy> kBalancePolicies[] = {
    {BalancePolicy::WeightedRandom, "weighted_random"}, {BalancePolicy::RoundRobin, "round_robin"},
    {BalancePolicy::LeastOutstanding, "least_outstanding"}, {BalancePolicy::Latency, "latency"},
    {BalancePolicy::GpuAware, "gpu_aware"},
};

void Loader::loadModels(const YAML::Node& n, const YAML::Node& root, Config& cfg) {
  // A gateway in front of MCP servers alone needs no model.
  const bool serves_mcp = std::any_of(cfg.providers.begin(), cfg.providers.end(), [](const ProviderConfig& p) { return p.type == "mcp"; });
  if (!n && serves_mcp) return;
  if (!n) fail(root, "models", "required: at least one model");
  if (!n.IsSequence() || (n.size() == 0 && !serves_mcp)) fail(n, "models", "expected a non-empty list");
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string p = "models[" + std::to_string(i) + "]";
    const YAML::Node& y = n[i];
    checkKeys(y, p, {"name", "provider", "upstream_model", "pricing", "deployments", "balancing", "canary", "outlier",
                     "gpu", "fallbacks", "fallback_on", "fallback_response", "cache"});
    ModelConfig mc;
    if (!y["name"]) fail(y, p + ".name", "required");
    mc.name = nonEmpty(y["name"], p + ".name");
    if (cfg.model_index.count(mc.name)) fail(y["name"], p + ".name", "duplicate model name \"" + mc.name + "\"");
    // Either one deployment inline (provider + upstream_model) or a list.
    if (y["deployments"]) {
      if (y["provider"] || y["upstream_model"])
        fail(y["provider"] ? y["provider"] : y["upstream_model"], p + ".provider",
             "set provider/upstream_model or deployments, not both");
      const YAML::Node& ds = y["deployments"];
      if (!ds.IsSequence() || ds.size() == 0) fail(ds, p + ".deployments", "expected a non-empty list");
      for (std::size_t j = 0; j < ds.size(); ++j)
        mc.deployments.push_back(loadDeployment(ds[j], p + ".deployments[" + std::to_string(j) + "]", mc, cfg));
    } else {
      if (!y["provider"]) fail(y, p + ".provider", "required (or a deployments list)");
      DeploymentConfig d;
      d.provider = nonEmpty(y["provider"], p + ".provider");
      d.provider_index = providerIndex(y["provider"], p + ".provider", d.provider, cfg);
      d.upstream_model = y["upstream_model"] ? nonEmpty(y["upstream_model"], p + ".upstream_model") : mc.name;
      d.id = d.provider;
      d.node = d.id;
      mc.deployments.push_back(std::move(d));
    }
    if (auto v = y["balancing"]) {
      const std::string b = str(v, p + ".balancing");
      const auto policy = valueOf(kBalancePolicies, b);
      if (!policy) fail(v, p + ".balancing", "unknown policy \"" + b + "\" (" + choices(kBalancePolicies, " | ") + ")");
      mc.balancing = *policy;
    }
    if (auto c = y["canary"]) {
      const std::string cp = p + ".canary";
      checkKeys(c, cp, {"version", "percent", "sticky_header", "sticky_by", "allow"});
      if (auto v = c["sticky_by"]) {
        const std::string by = str(v, cp + ".sticky_by");
        if (by == "tenant") mc.canary.sticky_by_tenant = true;
        else if (by != "api_key" && by != "header") fail(v, cp + ".sticky_by", "expected api_key, header or tenant");
        if (by == "header" && !c["sticky_header"]) fail(v, cp + ".sticky_header", "required with sticky_by: header");
        if (by != "header" && c["sticky_header"]) fail(c["sticky_header"], cp + ".sticky_header", "only with sticky_by: header");
      }
      mc.canary.enabled = true;
      if (auto v = c["version"]) mc.canary.version = nonEmpty(v, cp + ".version");
      if (auto v = c["percent"]) mc.canary.percent = percent(v, cp + ".percent");
      if (auto v = c["sticky_header"]) {
        mc.canary.sticky_header = nonEmpty(v, cp + ".sticky_header");
        for (auto& ch : mc.canary.sticky_header) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      }
      if (auto v = c["allow"]) {
        if (!v.IsSequence()) fail(v, cp + ".allow", "expected a list of key values (user ids)");
        for (std::size_t k = 0; k < v.size(); ++k) mc.canary.allow.push_back(nonEmpty(v[k], cp + ".allow[" + std::to_string(k) + "]"));
      }
    }
    if (auto o = y["outlier"]) {
      const std::string op = p + ".outlier";
      checkKeys(o, op, {"consecutive_failures", "error_rate", "interval", "min_requests", "eject_for", "max_eject_for"});
      if (auto v = o["consecutive_failures"])
        mc.outlier.consecutive_failures = static_cast<int>(integer(v, op + ".consecutive_failures", 0, 10000));
      if (auto v = o["error_rate"]) mc.outlier.error_rate = static_cast<int>(integer(v, op + ".error_rate", 0, 100));
      if (auto v = o["interval"]) mc.outlier.interval = duration(v, op + ".interval", Millis(1));
      if (auto v = o["min_requests"]) mc.outlier.min_requests = static_cast<int>(integer(v, op + ".min_requests", 1, 1'000'000));
      if (auto v = o["eject_for"]) mc.outlier.eject_for = duration(v, op + ".eject_for", Millis(1));
      if (auto v = o["max_eject_for"]) mc.outlier.max_eject_for = duration(v, op + ".max_eject_for", Millis(1));
      if (mc.outlier.max_eject_for < mc.outlier.eject_for) fail(o, op + ".max_eject_for", "must not be below eject_for");
    }
    if (auto g = y["gpu"]) {
      const std::string gp = p + ".gpu";
      checkKeys(g, gp, {"gpu_util", "gpu_memory", "connections", "connections_scale", "queue", "queue_scale",
                        "degraded_factor", "eject_score", "top", "split", "status_ttl"});
      GpuScoreConfig& gc = mc.gpu;
      for (auto [key, slot] : std::initializer_list<std::pair<const char*, double*>>{
               {"gpu_util", &gc.gpu_util}, {"gpu_memory", &gc.gpu_memory}, {"connections", &gc.connections},
               {"connections_scale", &gc.connections_scale}, {"queue", &gc.queue}, {"queue_scale", &gc.queue_scale},
               {"degraded_factor", &gc.degraded_factor}, {"eject_score", &gc.eject_score}})
        if (auto v = g[key]) *slot = number(v, gp + "." + key, "a score weight or factor");
      if (gc.connections_scale <= 0 || gc.queue_scale <= 0) fail(g, gp, "connections_scale and queue_scale must be positive");
      if (auto v = g["split"]) {
        if (!v.IsSequence() || v.size() == 0 || v.size() > 100) fail(v, gp + ".split", "expected a list of 1 to 100 shares, e.g. [60, 30, 10]");
        gc.split.clear();
        for (std::size_t k = 0; k < v.size(); ++k) {
          const double share = number(v[k], gp + ".split[" + std::to_string(k) + "]", "a share");
          if (!(share > 0)) fail(v[k], gp + ".split[" + std::to_string(k) + "]", "a share must be positive");
          gc.split.push_back(share);
        }
        gc.top = static_cast<int>(gc.split.size());
      }
      if (auto v = g["top"]) {
        gc.top = static_cast<int>(integer(v, gp + ".top", 1, 100));
        if (static_cast<std::size_t>(gc.top) > gc.split.size())
          fail(v, gp + ".top", "is more than the " + std::to_string(gc.split.size()) + " shares of gpu.split: give a share per rank");
      }
      if (auto v = g["status_ttl"]) gc.status_ttl = duration(v, gp + ".status_ttl", Millis(1));
    }
    if (auto pr = y["pricing"]) {
      const std::string pp = p + ".pricing";
      checkKeys(pr, pp, {"input", "output", "cached_input", "per_image", "per_audio_second", "per_character",
                         "batch_input", "batch_output"});
      // Token prices come together; an image or audio model may have its unit price only.
      if (!pr["per_image"] && !pr["per_audio_second"] && !pr["per_character"] && (!pr["input"] || !pr["output"]))
        fail(pr, pp, "input and output prices (USD per million tokens) are required (or per_image, per_audio_second or per_character alone)");
      if (!pr["input"] != !pr["output"]) fail(pr, pp, "input and output prices (USD per million tokens) go together");
      mc.pricing.set = true;
      if (pr["input"]) mc.pricing.input = price(pr["input"], pp + ".input");
      if (pr["output"]) mc.pricing.output = price(pr["output"], pp + ".output");
      mc.pricing.cached_input = pr["cached_input"] ? price(pr["cached_input"], pp + ".cached_input") : mc.pricing.input;
      if (auto v = pr["per_image"]) mc.pricing.per_image = number(v, pp + ".per_image", "USD per image", 1000);
      if (auto v = pr["per_audio_second"]) mc.pricing.per_audio_second = number(v, pp + ".per_audio_second", "USD per second of audio", 100);
      if (auto v = pr["batch_input"]) mc.pricing.batch_input = price(v, pp + ".batch_input");
      if (auto v = pr["batch_output"]) mc.pricing.batch_output = price(v, pp + ".batch_output");
      if (auto v = pr["per_character"]) mc.pricing.per_character = number(v, pp + ".per_character", "USD per character", 1);
    }
    if (auto f = y["fallbacks"]) {
      if (!f.IsSequence()) fail(f, p + ".fallbacks", "expected a list of model names");
      for (std::size_t k = 0; k < f.size(); ++k) mc.fallbacks.push_back(nonEmpty(f[k], p + ".fallbacks[" + std::to_string(k) + "]"));
    }
    if (auto f = y["fallback_on"]) {
      if (!f.IsSequence()) fail(f, p + ".fallback_on", "expected a list of HTTP statuses");
      mc.fallback_on.clear();
      for (std::size_t k = 0; k < f.size(); ++k)
        mc.fallback_on.push_back(static_cast<int>(integer(f[k], p + ".fallback_on[" + std::to_string(k) + "]", 400, 599)));
    }
    if (auto f = y["fallback_response"]) {
      const std::string fp = p + ".fallback_response";
      checkKeys(f, fp, {"message", "status"});
      if (!f["message"]) fail(f, fp + ".message", "required: the text answered when every upstream failed");
      mc.fallback_response = true;
      mc.fallback_message = nonEmpty(f["message"], fp + ".message");
      if (auto v = f["status"]) mc.fallback_status = static_cast<int>(integer(v, fp + ".status", 200, 599));
    }
    mc.cache = cfg.cache.defaults;
    if (auto c = y["cache"]) mc.cache = cachePolicy(c, p + ".cache", cfg.cache.defaults);
    for (auto& d : mc.deployments) d.index = cfg.deployment_count++;
    markCanaryDeployments(mc);
    cfg.model_index.emplace(mc.name, cfg.models.size());
    cfg.models.push_back(std::move(mc));
  }
}

void Loader::resolveFallbacks(const YAML::Node& n, Config& cfg) {
  for (std::size_t i = 0; i < cfg.models.size(); ++i) {
    ModelConfig& m = cfg.models[i];
    for (std::size_t k = 0; k < m.fallbacks.size(); ++k) {
      const std::string p = "models[" + std::to_string(i) + "].fallbacks[" + std::to_string(k) + "]";
      auto it = cfg.model_index.find(m.fallbacks[k]);
      if (it == cfg.model_index.end()) fail(n[i]["fallbacks"][k], p, "unknown model \"" + m.fallbacks[k] + "\"");
      if (it->second == i) fail(n[i]["fallbacks"][k], p, "a model cannot fall back to itself");
      m.fallback_indices.push_back(it->second);
    }
  }
}

DeploymentConfig Loader::loadDeployment(const YAML::Node& y, const std::string& p, const ModelConfig& mc, const Config& cfg) {
  checkKeys(y, p, {"id", "provider", "upstream_model", "weight", "version", "labels", "node", "dns"});
  DeploymentConfig d;
  if (!y["provider"]) fail(y, p + ".provider", "required");
  d.provider = nonEmpty(y["provider"], p + ".provider");
  d.provider_index = providerIndex(y["provider"], p + ".provider", d.provider, cfg);
  d.upstream_model = y["upstream_model"] ? nonEmpty(y["upstream_model"], p + ".upstream_model") : mc.name;
  d.id = y["id"] ? nonEmpty(y["id"], p + ".id") : d.provider;
  if (d.id.find_first_of("/ \t\r\n\"") != std::string::npos) fail(y["id"], p + ".id", "must not contain '/', quotes or spaces");
  for (const auto& other : mc.deployments)
    if (other.id == d.id)
      fail(y["id"] ? y["id"] : y, p + ".id", "duplicate deployment id \"" + d.id + "\" (set distinct ids)");
  if (auto v = y["weight"]) d.weight = static_cast<std::uint32_t>(integer(v, p + ".weight", 0, 1'000'000));
  if (auto v = y["version"]) d.version = nonEmpty(v, p + ".version");
  if (auto l = y["labels"]) {
    if (!l.IsMap()) fail(l, p + ".labels", "expected a mapping of label to value");
    for (const auto& kv : l) d.labels.emplace_back(str(kv.first, p + ".labels"), str(kv.second, p + ".labels"));
  }
  d.node = y["node"] ? nonEmpty(y["node"], p + ".node") : d.id;
  if (auto n = y["dns"]) {
    const std::string np = p + ".dns";
    auto dns = std::make_shared<DnsDiscoveryConfig>();
    if (n.IsScalar()) {
      dns->name = nonEmpty(n, np);
    } else {
      checkKeys(n, np, {"name", "type", "port", "min_ttl", "max_ttl", "slow_start", "on_empty"});
      if (!n["name"]) fail(n, np + ".name", "required: the DNS name whose records are the endpoints");
      dns->name = nonEmpty(n["name"], np + ".name");
      if (auto v = n["type"]) {
        const std::string t = str(v, np + ".type");
        if (t == "A") dns->type = DnsDiscoveryConfig::Type::A;
        else if (t == "AAAA") dns->type = DnsDiscoveryConfig::Type::AAAA;
        else if (t == "SRV") dns->type = DnsDiscoveryConfig::Type::SRV;
        else fail(v, np + ".type", "expected A, AAAA or SRV");
      }
      if (auto v = n["port"]) {
        if (dns->type == DnsDiscoveryConfig::Type::SRV) fail(v, np + ".port", "SRV records carry the port");
        dns->port = static_cast<std::uint16_t>(integer(v, np + ".port", 1, 65535));
      }
      if (auto v = n["min_ttl"]) dns->min_ttl = duration(v, np + ".min_ttl", Millis(100));
      if (auto v = n["max_ttl"]) dns->max_ttl = duration(v, np + ".max_ttl", Millis(100));
      if (dns->max_ttl < dns->min_ttl) fail(n["max_ttl"] ? n["max_ttl"] : n, np + ".max_ttl", "must not be below min_ttl");
      if (auto v = n["slow_start"]) dns->slow_start = duration(v, np + ".slow_start");
      if (auto v = n["on_empty"]) {
        const std::string e = str(v, np + ".on_empty");
        if (e == "keep") dns->keep_on_empty = true;
        else if (e == "clear") dns->keep_on_empty = false;
        else fail(v, np + ".on_empty", "expected keep (the last endpoints stay) or clear");
      }
    }
    if (dns->port == 0) dns->port = cfg.providers[d.provider_index].port;
    d.dns = std::move(dns);
  }
  return d;
}

std::size_t Loader::providerIndex(const YAML::Node& node, const std::string& path, const std::string& name, const Config& cfg) {
  for (std::size_t j = 0; j < cfg.providers.size(); ++j)
    if (cfg.providers[j].name == name) {
      if (cfg.providers[j].type == "mcp") fail(node, path, "provider \"" + name + "\" is an MCP server (type mcp): it serves /mcp, not models");
      return j;
    }
  fail(node, path, "unknown provider \"" + name + "\"");
  return 0;
}

}  // namespace tahua::config_detail

namespace tahua {

void markCanaryDeployments(ModelConfig& model) {
  model.stable_table = {};
  model.canary_table = {};
  for (std::size_t i = 0; i < model.deployments.size(); ++i) {
    DeploymentConfig& d = model.deployments[i];
    d.canary = model.canary.enabled && d.version == model.canary.version;
    if (d.weight == 0) continue;
    PickTable& t = d.canary ? model.canary_table : model.stable_table;
    t.index.push_back(static_cast<std::uint32_t>(i));
    t.cumulative.push_back((t.cumulative.empty() ? 0 : t.cumulative.back()) + d.weight);
  }
}

std::string_view balancePolicyName(BalancePolicy p) { return config_detail::nameOf(config_detail::kBalancePolicies, p); }

}  // namespace tahua

namespace tahua {

std::string embeddingModelProblem(const Config& cfg, std::string_view model) {
  const ModelConfig* m = cfg.findModel(model);
  if (!m) return "unknown model \"" + std::string(model) + "\"";
  if (m->deployments.empty()) return "model \"" + std::string(model) + "\" has no deployment";
  const std::string& type = cfg.providers[m->deployments.front().provider_index].type;
  if (type != "openai" && type != "azure-openai" && type != "mock")
    return "model \"" + std::string(model) + "\" must be served by an openai, azure-openai or mock provider (the kinds that pass embeddings through)";
  return {};
}

}  // namespace tahua
