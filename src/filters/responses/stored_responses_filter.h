#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

class StateStore;
struct WorkerMetrics;

// Stored responses: the Responses API's state for the answers tahua translates (every
// provider but `openai`-type ones, which pass /v1/responses through and keep their own).
// - A translated answer to a request with `store` (the API's default) is kept in the
//   state store with its own input items, per tenant (or key), with a TTL and a byte
//   bound per tenant (oldest first out): `responses` in the config.
// - A request's previous_response_id and item_references that name responses tahua
//   issued are expanded into the request before it is routed (the limits and the
//   upstream see the whole conversation): they then work for every provider, OpenAI's
//   included, and on every replica sharing the store.
// - GET and DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items answer
//   from the store, as OpenAI's do. Another tenant's id is "not found", like any other.
// Early in the chain (before the prompt templates and the router); it keeps the answer as
// the translator made it, scrubbed of the provider's credentials as the client's copy is.
std::unique_ptr<Filter> makeStoredResponsesFilter(StateStore& store, WorkerMetrics& metrics);

}  // namespace tahua
