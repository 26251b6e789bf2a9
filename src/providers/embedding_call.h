// Embeddings the gateway asks for itself (the semantic cache's lookups, the guardrails'
// answer-quality check): a POST to the /embeddings of one of the gateway's own models,
// made by the worker (WorkerServices::fetch), never through the request's own attempt.
// The model's first deployment is called, on an OpenAI-type provider ({base_url}/embeddings,
// a bearer key) or an Azure OpenAI one ({base_url}/deployments/{name}/embeddings, an
// api-key header): the two wire formats whose embeddings the gateway passes through.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/duration.h"
#include "http/outbound_call.h"

namespace tahua {

struct Config;

// Why `model` cannot embed ("" : it can): unknown, or served by a provider of another kind.
std::string embeddingModelProblem(const Config& cfg, std::string_view model);

// The call that embeds `inputs` (one vector each) with `model`; nullopt if it cannot embed.
std::optional<OutboundRequest> embeddingCall(const Config& cfg, std::string_view model, const std::vector<std::string>& inputs,
                                             Millis timeout);

// data[i].embedding of an OpenAI embeddings answer, in `index` order; empty unless it
// holds exactly `count` vectors of one non-zero length (at most 65,536 numbers each).
std::vector<std::vector<float>> embeddingsOf(const OutboundResponse& answer, std::size_t count);

// Cosine similarity in [-1, 1]; 0 for a zero vector.
double cosineSimilarity(std::span<const float> a, std::span<const float> b);

}  // namespace tahua
