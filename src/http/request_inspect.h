// Reads from a request body only what routing needs (model, stream,
// stream_options.include_usage) with simdjson's on-demand parser, without building a
// DOM, and rewrites the model name in place when the upstream name differs.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <variant>

#include "core/error.h"

namespace tahua {

struct RequestFacts {
  std::string model;
  bool stream = false;
  bool include_usage = false;
  // Where the model's JSON string token (with its quotes) sits in the body.
  std::size_t model_offset = 0;
  std::size_t model_length = 0;
};

// `body` may get extra capacity reserved (simdjson reads a few bytes past the end).
std::variant<RequestFacts, Error> inspectRequest(std::string& body);

// Replaces the model token in `body` with `new_model` (JSON-escaped). Other bytes are
// left exactly as the client sent them.
void rewriteModel(std::string& body, const RequestFacts& facts, std::string_view new_model);

}  // namespace tahua
