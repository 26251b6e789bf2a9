#include "providers/embedding_call.h"

#include <boost/json.hpp>

#include <cmath>

#include "config/config.h"

namespace tahua {
namespace {

namespace bj = boost::json;

bool callable(std::string_view type) { return type == "openai" || type == "azure-openai"; }

}  // namespace

std::string embeddingModelProblem(const Config& cfg, std::string_view model) {
  const ModelConfig* m = cfg.findModel(std::string(model));
  if (!m) return "unknown model \"" + std::string(model) + "\"";
  if (m->deployments.empty()) return "model \"" + std::string(model) + "\" has no deployment";
  if (!callable(cfg.providers[m->deployments.front().provider_index].type))
    return "model \"" + std::string(model) + "\" must be served by an openai or azure-openai provider (its /embeddings is called)";
  return {};
}

std::optional<OutboundRequest> embeddingCall(const Config& cfg, std::string_view model, const std::vector<std::string>& inputs,
                                             Millis timeout) {
  if (!embeddingModelProblem(cfg, model).empty()) return std::nullopt;
  const DeploymentConfig& d = cfg.findModel(std::string(model))->deployments.front();
  const ProviderConfig& p = cfg.providers[d.provider_index];
  const bool azure = p.type == "azure-openai";
  const std::string target = azure ? p.base_url + "/deployments/" + d.upstream_model + "/embeddings?api-version=" + p.api_version
                                   : p.base_url + "/embeddings";
  auto url = parseHttpUrl(target, nullptr, true);
  if (!url) return std::nullopt;
  OutboundRequest r;
  r.method = "POST";
  r.url = std::move(*url);
  r.headers.emplace_back("content-type", "application/json");
  if (!p.api_key.empty()) {
    if (azure) r.headers.emplace_back("api-key", p.api_key);
    else r.headers.emplace_back("authorization", "Bearer " + p.api_key);
  }
  for (const auto& h : p.headers) r.headers.push_back(h);
  bj::object body;
  if (!azure) body["model"] = d.upstream_model;
  if (inputs.size() == 1) {
    body["input"] = inputs.front();
  } else {
    bj::array in;
    for (const auto& s : inputs) in.emplace_back(s);
    body["input"] = std::move(in);
  }
  r.body = bj::serialize(body);
  r.timeout = timeout;
  r.max_response_bytes = 4 << 20;
  return r;
}

std::vector<std::vector<float>> embeddingsOf(const OutboundResponse& answer, std::size_t count) {
  std::vector<std::vector<float>> out;
  if (answer.status != 200 || count == 0) return out;
  bj::error_code ec;
  const bj::value doc = bj::parse(answer.body, ec);
  const bj::array* data = nullptr;
  if (!ec && doc.is_object())
    if (const bj::value* v = doc.get_object().if_contains("data")) data = v->if_array();
  if (!data || data->size() != count) return out;
  out.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    const bj::object* item = (*data)[i].if_object();
    const bj::value* e = item ? item->if_contains("embedding") : nullptr;
    const bj::value* index = item ? item->if_contains("index") : nullptr;
    std::size_t at = i;
    if (index) {
      if (!index->is_int64() || index->get_int64() < 0 || static_cast<std::size_t>(index->get_int64()) >= count) return {};
      at = static_cast<std::size_t>(index->get_int64());
    }
    if (!e || !e->is_array() || e->get_array().empty() || e->get_array().size() > 65536 || !out[at].empty()) return {};
    out[at].reserve(e->get_array().size());
    for (const auto& x : e->get_array()) {
      if (!x.is_number()) return {};
      const double f = x.to_number<double>();
      if (!std::isfinite(f)) return {};
      out[at].push_back(static_cast<float>(f));
    }
    if (out[at].size() != out[0].size() && !out[0].empty()) return {};
  }
  for (const auto& v : out)
    if (v.size() != out[0].size()) return {};
  return out;
}

double cosineSimilarity(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size() || a.empty()) return 0;
  double dot = 0, na = 0, nb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  if (na == 0 || nb == 0) return 0;
  return dot / (std::sqrt(na) * std::sqrt(nb));
}

}  // namespace tahua
