// Reads from a request body only what routing needs (model, stream,
// stream_options.include_usage) with simdjson's on-demand parser, without building a
// DOM, and rewrites the model name in place when the upstream name differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "core/error.h"

namespace tahua {

struct RequestFacts {
  std::string model;
  bool stream = false;
  bool include_usage = false;
  // max_tokens / max_completion_tokens (OpenAI) / max_output_tokens (Responses): the
  // largest one given, 0 when none.
  std::int64_t max_tokens = 0;
  double temperature = -1;  // -1 when not given (a trace attribute)
  std::int64_t n = 0;       // `n` (choices, images), 0 when not given
  // Where the model's JSON string token (with its quotes) sits in the body.
  std::size_t model_offset = 0;
  std::size_t model_length = 0;
};

// `body` may get extra capacity reserved (simdjson reads a few bytes past the end).
// Arrays and objects nested deeper than `max_depth` are refused (400 invalid_json), so
// no parser after this one (translation builds a DOM) recurses without bound.
std::variant<RequestFacts, Error> inspectRequest(std::string& body, std::size_t max_depth = 128);

// Whether JSON text nests arrays/objects deeper than `max_depth`. Strings are skipped
// with memchr, so a prompt-heavy body costs little more than reading it once.
bool jsonDeeperThan(std::string_view json, std::size_t max_depth);

// Replaces the model token in `body` with `new_model` (JSON-escaped). Other bytes are
// left exactly as the client sent them.
void rewriteModel(std::string& body, const RequestFacts& facts, std::string_view new_model);

}  // namespace tahua
