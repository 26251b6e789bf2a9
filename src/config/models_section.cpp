// models: deployments, balancing, canary, outlier ejection, GPU scoring, pricing and
// fallbacks.
#include <algorithm>
#include <cctype>

#include "config/loader_detail.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kModelFields[] = {
    nonEmpty("name", "", "The name clients send as `model`; unique.").needed(),
    nonEmpty("provider", "",
             "One deployment: the provider serving it (its id is the provider's name). Required unless `deployments` "
             "is given instead."),
    nonEmpty("upstream_model", "",
             "With provider: the name the upstream knows the model by (Azure: the deployment; Bedrock: the model id). "
             "Default: `name`."),
    section("pricing", "USD prices: the cost in the access log, usage records, metrics and budgets; none: no cost."),
    list("deployments", "", "Several deployments instead of provider/upstream_model (each: `models[].deployments[]`)."),
    choice("balancing", "weighted_random | round_robin | least_outstanding | latency | gpu_aware", "weighted_random",
           "How a deployment is picked: by weight at random; smooth weighted round robin; the fewer requests in flight "
           "of two; the lower latency (peak-EWMA time to first byte) of two; the best node status score (`gpu`)."),
    section("canary", "Splits the model's traffic between its stable and canary versions."),
    section("outlier", "Passive ejection of deployments that fail (5xx, connect errors, timeouts)."),
    section("gpu", "GPU-aware scoring of the nodes' status reports (balancing: gpu_aware)."),
    list("fallbacks", "[]",
         "Models tried in order when every deployment of this one failed before anything reached the client; answers "
         "then carry `X-Tahua-Model`."),
    list("fallback_on", "[429, 500, 502, 503, 504]",
         "Upstream statuses that fail over to the fallbacks (so do connect errors, timeouts, TLS failures, malformed "
         "answers, open breakers); a client error (400, 401, ...) never does."),
    section("fallback_response", "The last resort when everything failed: a configured answer, marked as one."),
    section("cache", "The model's own response-cache policy over `cache`'s (docs/response-cache.md)."),
};
const Table kModel("models[]", "A model clients name, served by one or more deployments.", kModelFields);

constexpr Field kDeploymentFields[] = {
    nonEmpty("id", "", "Unique within the model; no '/', quotes or spaces. Default: the provider's name."),
    nonEmpty("provider", "", "The provider serving it.").needed(),
    nonEmpty("upstream_model", "", "The name the upstream knows the model by. Default: the model's name."),
    integer("weight", 0, 1'000'000, "100",
            "Relative share under the weighted policies; 0: only when pinned or when nothing else is left."),
    nonEmpty("version", "stable",
             "The canary's version makes it part of the canary subset; `X-Tahua-Version` (or `?modelVersion=`) pins a "
             "version."),
    map("labels", "{}", "Metadata (region, zone, ...), listed by the admin API."),
    nonEmpty("node", "",
             "The inference node whose status reports (`PUT /admin/v1/nodes/{id}/status`) score this deployment. "
             "Default: its id."),
    any("dns", "",
        "Endpoints from DNS: each address of the name's records is a deployment of its own. A name, or the mapping "
        "below (`models[].deployments[].dns`)."),
};
const Table kDeployment("models[].deployments[]", "One place the model is served: a provider and the name the "
                        "upstream knows the model by, with the metadata routing decides on.",
                        kDeploymentFields);

constexpr Field kDnsFields[] = {
    nonEmpty("name", "", "The DNS name whose records are the endpoints (a headless Service).").needed(),
    choice("type", "A | AAAA | SRV", "A", "The records asked for; SRV records carry each endpoint's port."),
    integer("port", 1, 65535, "", "A and AAAA: the endpoints' port. Default: the provider base_url's. Not with SRV."),
    duration("min_ttl", 100, "5s", "The records are resolved again after their TTL, kept within min_ttl..max_ttl."),
    duration("max_ttl", 100, "60s", "The same, the upper bound."),
    duration("slow_start", 0, "0s", "A new endpoint's weight ramps up from 10% over this; 0s: at once."),
    choice("on_empty", "keep | clear", "keep", "An answer without records keeps the last endpoints, or drops them (clear)."),
};
const Table kDns("models[].deployments[].dns", "DNS discovery of a deployment's endpoints (README \"Discovering upstreams\"); "
                 "resolvers: `discovery`.",
                 kDnsFields);

constexpr Field kCanaryFields[] = {
    nonEmpty("version", "canary", "Deployments with this version are the canary."),
    number("percent", 100, "0", "Share of requests sent to the canary (fractions allowed); the admin API can change it.",
           "a percentage"),
    nonEmpty("sticky_header", "", "The header hashed with sticky_by: header (x-user-id), so a user stays on one side."),
    choice("sticky_by", "api_key | header | tenant", "",
           "What a request is hashed on: the client's API key, sticky_header, or the caller's tenant. Default: header "
           "when sticky_header is set, else api_key; no key: random per request."),
    list("allow", "[]", "Sticky key values (user ids; tenant names with sticky_by: tenant) always sent to the canary."),
};
const Table kCanary("models[].canary", "A canary release; the version is chosen by pin, then allow list, then sticky "
                    "hash, then percent.",
                    kCanaryFields);

constexpr Field kOutlierFields[] = {
    integer("consecutive_failures", 0, 10000, "5",
            "Failures in a row (5xx, connect errors, timeouts) that eject a deployment (per worker); 0: off."),
    integer("error_rate", 0, 100, "0",
            "Or: this percent of calls failing within `interval` (at least min_requests of them) ejects it; 0: off."),
    duration("interval", 1, "60s", "The error_rate window."),
    integer("min_requests", 1, 1'000'000, "10", "Calls an interval needs for an error_rate verdict."),
    duration("eject_for", 1, "30s", "The first ejection; it doubles on each repeat."),
    duration("max_eject_for", 1, "300s", "The longest ejection; not below eject_for."),
};
const Table kOutlier("models[].outlier", "Outlier ejection: a deployment that keeps failing gets no traffic for a "
                     "while (unless every deployment is out).",
                     kOutlierFields);

constexpr std::string_view kWeight = "a score weight or factor";
constexpr Field kGpuFields[] = {
    number("gpu_util", 0, "40", "Score weight of GPU utilisation (0..1 reported).", kWeight),
    number("gpu_memory", 0, "30", "Score weight of GPU memory use (0..1 reported).", kWeight),
    number("connections", 0, "20", "Score weight of active connections / connections_scale.", kWeight),
    number("connections_scale", 0, "10", "Active connections counted as 1 (must be positive).", kWeight),
    number("queue", 0, "10", "Score weight of queued requests / queue_scale.", kWeight),
    number("queue_scale", 0, "5", "Queued requests counted as 1 (must be positive).", kWeight),
    number("degraded_factor", 0, "1.5", "The score is multiplied by this when the node reports DEGRADED.", kWeight),
    number("eject_score", 0, "90",
           "A node scoring above this (or UNHEALTHY, OVERLOADED) gets no traffic unless all do; lower is better.",
           kWeight),
    integer("top", 1, 100, "3", "The best nodes traffic is spread over, at most the shares of split. Default: every share."),
    list("split", "[60, 30, 10]", "Relative shares of the best nodes, best first (1 to 100 positive numbers)."),
    duration("status_ttl", 1, "15s", "A report older than this is ignored (a node without one counts as idle)."),
};
const Table kGpu("models[].gpu", "GPU-aware balancing: the nodes' status reports scored (lower is better) as "
                 "gpu_util×40 + gpu_memory×30 + connections/10×20 + queued/5×10, ×1.5 when DEGRADED.",
                 kGpuFields);

constexpr std::string_view kPerMillion = "USD per million tokens";
constexpr Field kPricingFields[] = {
    number("input", 1e6, "", "Uncached prompt tokens; input and output go together.", kPerMillion),
    number("output", 1e6, "", "Completion tokens.", kPerMillion),
    number("cached_input", 1e6, "", "Prompt tokens read from the provider's cache. Default: input.", kPerMillion),
    number("per_image", 1000, "", "Each image an images answer carries (generations, edits); may stand alone.",
           "USD per image"),
    number("per_audio_second", 100, "", "Each second of audio transcribed or translated; may stand alone.",
           "USD per second of audio"),
    number("per_character", 1, "", "Each character of text spoken (/v1/audio/speech); may stand alone.",
           "USD per character"),
    number("batch_input", 1e6, "", "Prompt tokens run in a batch (/v1/batches). Default: input.", kPerMillion),
    number("batch_output", 1e6, "", "Completion tokens run in a batch. Default: output.", kPerMillion),
};
const Table kPricing("models[].pricing", "Prices: input and output per million tokens, or a unit price alone (an "
                     "image, audio or speech model).",
                     kPricingFields);

constexpr Field kFallbackResponseFields[] = {
    nonEmpty("message", "", "The answer's text, in the client API's shape, with `\"is_fallback\": true` and "
                            "`X-Tahua-Fallback: <the last failure>`.")
        .needed(),
    integer("status", 200, 599, "503", "Its status; a 2xx one answers a stream request with a well-formed stream."),
};
const Table kFallbackResponse("models[].fallback_response", "The answer given when the model and its fallbacks all "
                              "failed.",
                              kFallbackResponseFields);

}  // namespace

constexpr Named<BalancePolicy> kBalancePolicies[] = {
    {BalancePolicy::WeightedRandom, "weighted_random"}, {BalancePolicy::RoundRobin, "round_robin"},
    {BalancePolicy::LeastOutstanding, "least_outstanding"}, {BalancePolicy::Latency, "latency"},
    {BalancePolicy::GpuAware, "gpu_aware"},
};
static_assert(sameChoices(kBalancePolicies, fieldNamed(kModelFields, "balancing").bound));

void Loader::loadModels(const YAML::Node& n, const YAML::Node& root, Config& cfg) {
  // A gateway in front of MCP servers alone needs no model.
  const bool serves_mcp = std::any_of(cfg.providers.begin(), cfg.providers.end(), [](const ProviderConfig& p) { return p.type == "mcp"; });
  if (!n && serves_mcp) return;
  if (!n) fail(root, "models", "required: at least one model");
  if (!n.IsSequence() || (n.size() == 0 && !serves_mcp)) fail(n, "models", "expected a non-empty list");
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string p = "models[" + std::to_string(i) + "]";
    const YAML::Node& y = n[i];
    Fields f(*this, y, p, kModel);
    ModelConfig mc;
    f.read("name", mc.name);
    if (cfg.model_index.count(mc.name)) fail(y["name"], p + ".name", "duplicate model name \"" + mc.name + "\"");
    // Either one deployment inline (provider + upstream_model) or a list.
    if (const YAML::Node ds = f["deployments"]) {
      if (y["provider"] || y["upstream_model"])
        fail(y["provider"] ? y["provider"] : y["upstream_model"], p + ".provider",
             "set provider/upstream_model or deployments, not both");
      if (!ds.IsSequence() || ds.size() == 0) fail(ds, p + ".deployments", "expected a non-empty list");
      for (std::size_t j = 0; j < ds.size(); ++j)
        mc.deployments.push_back(loadDeployment(ds[j], p + ".deployments[" + std::to_string(j) + "]", mc, cfg));
    } else {
      if (!y["provider"]) fail(y, p + ".provider", "required (or a deployments list)");
      DeploymentConfig d;
      f.read("provider", d.provider);
      d.provider_index = providerIndex(y["provider"], p + ".provider", d.provider, cfg);
      d.upstream_model = mc.name;
      f.read("upstream_model", d.upstream_model);
      d.id = d.provider;
      d.node = d.id;
      mc.deployments.push_back(std::move(d));
    }
    if (auto v = f["balancing"]) {
      const std::string b = str(v, p + ".balancing");
      const auto policy = valueOf(kBalancePolicies, b);
      if (!policy) fail(v, p + ".balancing", "unknown policy \"" + b + "\" (" + choices(kBalancePolicies, " | ") + ")");
      mc.balancing = *policy;
    }
    if (auto c = f["canary"]) {
      Fields cf(*this, c, f.at("canary"), kCanary);
      const std::string cp = cf.path();
      if (auto v = cf["sticky_by"]) {
        const std::string by = str(v, cp + ".sticky_by");
        if (by == "tenant") mc.canary.sticky_by_tenant = true;
        else if (by != "api_key" && by != "header") fail(v, cp + ".sticky_by", "expected api_key, header or tenant");
        if (by == "header" && !c["sticky_header"]) fail(v, cp + ".sticky_header", "required with sticky_by: header");
        if (by != "header" && c["sticky_header"]) fail(c["sticky_header"], cp + ".sticky_header", "only with sticky_by: header");
      }
      mc.canary.enabled = true;
      cf.read("version", mc.canary.version);
      if (auto v = cf["percent"]) mc.canary.percent = percent(v, cp + ".percent");
      if (cf.read("sticky_header", mc.canary.sticky_header))
        for (auto& ch : mc.canary.sticky_header) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (auto v = cf["allow"]) {
        if (!v.IsSequence()) fail(v, cp + ".allow", "expected a list of key values (user ids)");
        for (std::size_t k = 0; k < v.size(); ++k) mc.canary.allow.push_back(nonEmpty(v[k], cp + ".allow[" + std::to_string(k) + "]"));
      }
    }
    if (auto o = f["outlier"]) {
      Fields of(*this, o, f.at("outlier"), kOutlier);
      of.read("consecutive_failures", mc.outlier.consecutive_failures);
      of.read("error_rate", mc.outlier.error_rate);
      of.read("interval", mc.outlier.interval);
      of.read("min_requests", mc.outlier.min_requests);
      of.read("eject_for", mc.outlier.eject_for);
      of.read("max_eject_for", mc.outlier.max_eject_for);
      if (mc.outlier.max_eject_for < mc.outlier.eject_for) fail(o, of.at("max_eject_for"), "must not be below eject_for");
    }
    if (auto g = f["gpu"]) {
      Fields gf(*this, g, f.at("gpu"), kGpu);
      const std::string gp = gf.path();
      GpuScoreConfig& gc = mc.gpu;
      for (auto [key, slot] : std::initializer_list<std::pair<const char*, double*>>{
               {"gpu_util", &gc.gpu_util}, {"gpu_memory", &gc.gpu_memory}, {"connections", &gc.connections},
               {"connections_scale", &gc.connections_scale}, {"queue", &gc.queue}, {"queue_scale", &gc.queue_scale},
               {"degraded_factor", &gc.degraded_factor}, {"eject_score", &gc.eject_score}})
        gf.read(key, *slot);
      if (gc.connections_scale <= 0 || gc.queue_scale <= 0) fail(g, gp, "connections_scale and queue_scale must be positive");
      if (auto v = gf["split"]) {
        if (!v.IsSequence() || v.size() == 0 || v.size() > 100) fail(v, gp + ".split", "expected a list of 1 to 100 shares, e.g. [60, 30, 10]");
        gc.split.clear();
        for (std::size_t k = 0; k < v.size(); ++k) {
          const double share = number(v[k], gp + ".split[" + std::to_string(k) + "]", "a share");
          if (!(share > 0)) fail(v[k], gp + ".split[" + std::to_string(k) + "]", "a share must be positive");
          gc.split.push_back(share);
        }
        gc.top = static_cast<int>(gc.split.size());
      }
      if (gf.read("top", gc.top) && static_cast<std::size_t>(gc.top) > gc.split.size())
        fail(g["top"], gp + ".top", "is more than the " + std::to_string(gc.split.size()) + " shares of gpu.split: give a share per rank");
      gf.read("status_ttl", gc.status_ttl);
    }
    if (auto pr = f["pricing"]) {
      Fields pf(*this, pr, f.at("pricing"), kPricing);
      const std::string pp = pf.path();
      // Token prices come together; an image or audio model may have its unit price only.
      if (!pr["per_image"] && !pr["per_audio_second"] && !pr["per_character"] && (!pr["input"] || !pr["output"]))
        fail(pr, pp, "input and output prices (USD per million tokens) are required (or per_image, per_audio_second or per_character alone)");
      if (!pr["input"] != !pr["output"]) fail(pr, pp, "input and output prices (USD per million tokens) go together");
      mc.pricing.set = true;
      pf.read("input", mc.pricing.input);
      pf.read("output", mc.pricing.output);
      mc.pricing.cached_input = mc.pricing.input;
      pf.read("cached_input", mc.pricing.cached_input);
      pf.read("per_image", mc.pricing.per_image);
      pf.read("per_audio_second", mc.pricing.per_audio_second);
      pf.read("batch_input", mc.pricing.batch_input);
      pf.read("batch_output", mc.pricing.batch_output);
      pf.read("per_character", mc.pricing.per_character);
    }
    if (auto v = f["fallbacks"]) {
      if (!v.IsSequence()) fail(v, p + ".fallbacks", "expected a list of model names");
      for (std::size_t k = 0; k < v.size(); ++k) mc.fallbacks.push_back(nonEmpty(v[k], p + ".fallbacks[" + std::to_string(k) + "]"));
    }
    if (auto v = f["fallback_on"]) {
      if (!v.IsSequence()) fail(v, p + ".fallback_on", "expected a list of HTTP statuses");
      mc.fallback_on.clear();
      for (std::size_t k = 0; k < v.size(); ++k)
        mc.fallback_on.push_back(static_cast<int>(integer(v[k], p + ".fallback_on[" + std::to_string(k) + "]", 400, 599)));
    }
    if (auto r = f["fallback_response"]) {
      Fields rf(*this, r, f.at("fallback_response"), kFallbackResponse);
      if (!r["message"]) fail(r, rf.at("message"), "required: the text answered when every upstream failed");
      mc.fallback_response = true;
      rf.read("message", mc.fallback_message);
      rf.read("status", mc.fallback_status);
    }
    mc.cache = cfg.cache.defaults;
    if (auto c = f["cache"]) mc.cache = cachePolicy(c, f.at("cache"), cfg.cache.defaults);
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
  Fields f(*this, y, p, kDeployment);
  DeploymentConfig d;
  f.read("provider", d.provider);
  d.provider_index = providerIndex(y["provider"], p + ".provider", d.provider, cfg);
  d.upstream_model = mc.name;
  f.read("upstream_model", d.upstream_model);
  d.id = d.provider;
  f.read("id", d.id);
  if (d.id.find_first_of("/ \t\r\n\"") != std::string::npos) fail(y["id"], p + ".id", "must not contain '/', quotes or spaces");
  for (const auto& other : mc.deployments)
    if (other.id == d.id)
      fail(y["id"] ? y["id"] : y, p + ".id", "duplicate deployment id \"" + d.id + "\" (set distinct ids)");
  f.read("weight", d.weight);
  f.read("version", d.version);
  if (auto l = f["labels"]) {
    if (!l.IsMap()) fail(l, p + ".labels", "expected a mapping of label to value");
    for (const auto& kv : l) d.labels.emplace_back(str(kv.first, p + ".labels"), str(kv.second, p + ".labels"));
  }
  d.node = d.id;
  f.read("node", d.node);
  if (auto n = f["dns"]) {
    const std::string np = f.at("dns");
    auto dns = std::make_shared<DnsDiscoveryConfig>();
    if (n.IsScalar()) {
      dns->name = nonEmpty(n, np);
    } else {
      Fields df(*this, n, np, kDns);
      if (!n["name"]) fail(n, np + ".name", "required: the DNS name whose records are the endpoints");
      df.read("name", dns->name);
      if (auto v = df["type"]) {
        const std::string t = str(v, np + ".type");
        if (t == "A") dns->type = DnsDiscoveryConfig::Type::A;
        else if (t == "AAAA") dns->type = DnsDiscoveryConfig::Type::AAAA;
        else if (t == "SRV") dns->type = DnsDiscoveryConfig::Type::SRV;
        else fail(v, np + ".type", "expected A, AAAA or SRV");
      }
      if (n["port"] && dns->type == DnsDiscoveryConfig::Type::SRV) fail(n["port"], np + ".port", "SRV records carry the port");
      df.read("port", dns->port);
      df.read("min_ttl", dns->min_ttl);
      df.read("max_ttl", dns->max_ttl);
      if (dns->max_ttl < dns->min_ttl) fail(n["max_ttl"] ? n["max_ttl"] : n, np + ".max_ttl", "must not be below min_ttl");
      df.read("slow_start", dns->slow_start);
      if (auto v = df["on_empty"]) {
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
  if (!cfg.providers[m->deployments.front().provider_index].serves(ProviderApi::Embeddings))
    return "model \"" + std::string(model) + "\": its provider's `apis` list does not name `embeddings`";
  return {};
}

}  // namespace tahua
