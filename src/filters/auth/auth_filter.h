#pragma once

#include <memory>

#include "filters/auth/auth_link.h"
#include "filters/filter.h"
#include "tenants/tenant_directory.h"

namespace tahua {

struct WorkerMetrics;
class WorkerServices;

// Authentication (`auth`): who is calling. Runs first among the request filters (before
// /v1/models is answered): the chain matching the request (auth.chains, else the
// built-in key check alone) sets ctx.principal or answers 401 in the client's API
// shape. The keys are the directory's (the config file's and the admin API's). Off
// (every request passes, ctx.principal empty) when the config declares no tenants and
// no keys and does not set auth.enabled. `plugin_link` makes the chains' plugin links
// (empty when no plugin is configured: those links are left out). `services`: the
// worker's, for the jwt links' key fetches (null: they use the keys already known).
std::unique_ptr<Filter> makeAuthFilter(const Config& config, TenantDirectoryPtr directory, WorkerMetrics& metrics,
                                       const PluginLinkFactory& plugin_link = {}, WorkerServices* services = nullptr);

// Authorization of the model (`model_access`), after the router has chosen it: a key
// or tenant with a models list may only use those (403 model_not_allowed).
std::unique_ptr<Filter> makeModelAccessFilter();

}  // namespace tahua
