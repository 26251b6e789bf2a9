// Answers kept in the state store: `idempotency` (an Idempotency-Key's stored answer)
// and `responses` (the Responses API's stored responses). Loaded in responses_section.cpp.
#pragma once

#include <cstddef>

#include "core/duration.h"

namespace tahua {

// Idempotency-Key (docs/tenants-and-limits.md "Idempotency"): a retry with the same key (and the same
// request) within `ttl` gets the stored answer instead of a second upstream call.
struct IdempotencyConfig {
  bool enabled = true;
  Millis ttl{3'600'000};        // a completed answer is kept this long
  Millis lock_ttl{120'000};     // an answer in progress holds its key this long, renewed while it runs
  std::size_t max_body_bytes = 4 * 1024 * 1024;  // a larger answer is not kept (its retries get 409)
};

// Stored responses (OpenAI's Responses API state, kept by the gateway for the answers it
// translates): previous_response_id and item_reference for every provider, and
// GET/DELETE /v1/responses/{id}. Kept in the state store, per tenant (or per key).
struct ResponsesConfig {
  bool store = true;               // false: nothing is kept, whatever a request's `store` says
  Millis ttl{30LL * 86'400'000};   // a stored response lives this long
  std::size_t max_bytes_per_tenant = 64u << 20;  // over it, the tenant's oldest go first
  bool per_key = false;            // scope by API key rather than by tenant
  std::size_t max_turns = 256;     // previous_response_id chains longer than this are refused
};

}  // namespace tahua
