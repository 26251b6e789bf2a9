#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

class StateStore;
class WorkerServices;
struct WorkerMetrics;

// Files and batches (/v1/files, /v1/batches): they name no model, so this filter routes
// them, to `files.provider` (or the tenant's own), and keeps them the tenant's:
// - an upload's or a batch's id is recorded in the state store with its owner (the
//   caller's tenant) and provider before its answer is sent; a record that cannot be
//   written is a 503, never an id that works for anyone;
// - every request that names an id (retrieve, content, delete, cancel, a batch's
//   input_file_id) is answered 404 file_not_found unless the caller's tenant owns it:
//   an upstream id alone reads nothing;
// - a list (GET /v1/files, /v1/batches) is the provider's page with the items the
//   caller does not own taken out;
// - a batch file's lines (purpose "batch") are checked before it is uploaded: each
//   line's body.model must be a model the key may use, served by the files provider,
//   and is renamed to that deployment's upstream name (the batch runs at the provider,
//   past every other check of the gateway);
// - a batch's output and error files become its owner's when the batch is read.
// Batches are registered for the batch poller (runtime/batch_poller.*), which meters
// them when they end. After the router and model access; before the limits and the
// balancer (it sets ctx.model to the files target, whose one deployment is the provider).
std::unique_ptr<Filter> makeFilesFilter(StateStore& store, WorkerServices& services);

namespace files {
// The owner of what a caller makes: its tenant, else its key, else "" (auth off).
std::string ownerOf(const RequestContext& ctx);
// The state store keys of an id's ownership record.
std::string fileKey(std::string_view id);
std::string batchKey(std::string_view id);
}  // namespace files

}  // namespace tahua
