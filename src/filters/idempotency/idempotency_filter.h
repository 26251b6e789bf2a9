#pragma once

#include <memory>

#include "filters/filter.h"
#include "filters/worker_services.h"

namespace tahua {

class StateStore;

// Idempotency-Key (`idempotency`, docs/tenants-and-limits.md "Idempotency"). A request with the header:
// - whose key has a stored answer (same caller, same request) gets it again, marked
//   x-idempotent-replayed: true; nothing goes upstream and nothing is charged;
// - whose key was used for a different request: 422 idempotency_key_reused;
// - whose key is being answered right now (a retry while the first still streams, a
//   client reconnecting after a drain): 409 idempotency_in_progress, Retry-After: 1;
// - otherwise runs, holding the key (a lock with owner check, renewed while it runs),
//   and its complete 2xx answer (stream or not, as the client got it) is stored.
// Keys are per caller (tenant and key), so one tenant's keys never meet another's.
// Last in the chain: it stores what the client received, after every rewriting filter;
// its request phase (onRequestBody) still runs before any upstream is chosen.
std::unique_ptr<Filter> makeIdempotencyFilter(StateStore& store, WorkerServices& services);

}  // namespace tahua
