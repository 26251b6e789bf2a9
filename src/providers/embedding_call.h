// Embeddings the gateway asks for itself (the semantic cache's lookups, the guardrails'
// answer-quality check): an embeddings request to one of the gateway's own models, sent
// by the worker through its upstream client (WorkerServices::callModel), never through
// the request's own attempt. The model's provider adapter encodes it as a client's
// /v1/embeddings to that model: openai (vLLM and the like), azure-openai and mock pass
// embeddings through; the other kinds have none.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "http/outbound_call.h"

namespace tahua {

// The body of the request that embeds `inputs` (one vector each) with `model`: float32s
// asked for in base64 (read ~20x cheaper than decimal numbers; a server that ignores it
// sends numbers, read as well).
std::string embeddingRequestBody(std::string_view model, const std::vector<std::string>& inputs);

// data[i].embedding of an OpenAI embeddings answer (numbers, or base64 float32s), in
// `index` order; empty unless it holds exactly `count` vectors of one non-zero length (at
// most 65,536 numbers each).
std::vector<std::vector<float>> embeddingsOf(const OutboundResponse& answer, std::size_t count);

// Cosine similarity in [-1, 1]; 0 for a zero vector.
double cosineSimilarity(std::span<const float> a, std::span<const float> b);

}  // namespace tahua
