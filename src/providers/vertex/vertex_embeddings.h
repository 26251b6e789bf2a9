// OpenAI's /v1/embeddings over Vertex AI's `predict` for Google's embedding models
// (gemini-embedding-001, text-embedding-005, text-multilingual-embedding-002): each
// input string is an instance `{"content": ...}`, `dimensions` is
// `parameters.outputDimensionality`; the predictions' `embeddings.values` come back as
// OpenAI's list (floats, or base64 float32s when the client asked, as the openai SDKs
// do by default), their `statistics.token_count`s as the usage.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "providers/provider.h"

namespace tahua {

// The predict request's body for the client's embeddings request, or a 400 naming the field.
std::variant<std::string, Error> vertexEmbeddingsBody(std::string_view openai_body);

// The answer's translator: `base64` when the client asked for encoding_format base64.
std::unique_ptr<ResponseTranslator> makeVertexEmbeddingsTranslator(bool base64, const ProviderConfig& provider);

// Whether an OpenAI embeddings request asks for base64 vectors.
bool wantsBase64Embeddings(std::string_view openai_body);

}  // namespace tahua
