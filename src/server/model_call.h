// A request the gateway makes itself to one of its own models (WorkerServices::callModel:
// the embeddings of the semantic cache and of the guardrails' quality check). It goes the
// way a client's request to that model would, minus the filters: the model's first
// deployment's provider adapter encodes it (path, credentials, upstream model name) and
// the worker's upstream client carries it (its keep-alive pool, the provider's TLS,
// proxy and timeouts), so any provider whose adapter takes the endpoint can answer, and
// a check per answer costs no connection set-up.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <string>
#include <string_view>

#include "filters/worker_services.h"
#include "http/outbound_call.h"
#include "providers/snapshot.h"
#include "server/upstream_client.h"

namespace tahua {

// The upstream's status, headers and body (raw, as it sent them), at most
// `call.max_response_bytes`, within `call.timeout`; status 0 and `error` when there is none.
boost::asio::awaitable<OutboundResponse> callModel(SnapshotPtr snapshot, UpstreamEnv& env, WorkerServices::ModelCall call);

}  // namespace tahua
