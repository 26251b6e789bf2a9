// Every tenant and API key the gateway knows: the config file's (GitOps) and the ones
// created through the admin API (kept in the state store), merged into one immutable
// view. The gateway rebuilds it when either side changes and hands each worker the new
// one; a worker's auth and rate-limit filters are built from it, and a request keeps
// the one it started with. Precedence: a name declared in the config file wins; an
// admin record with the same name is ignored (and logged) until the config drops it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "store/state_store.h"

namespace tahua {

struct TenantDirectory {
  std::vector<TenantConfig> tenants;
  std::vector<ApiKeyConfig> keys;
  const TenantConfig* tenant(std::string_view name) const;
  const ApiKeyConfig* key(std::string_view name) const;
};
using TenantDirectoryPtr = std::shared_ptr<const TenantDirectory>;

// The config's tenants and keys, then the store's records that do not clash with them
// (`notes` says which were skipped and why).
TenantDirectoryPtr buildTenantDirectory(const Config& config, const std::vector<StateStore::Record>& tenant_records,
                                        const std::vector<StateStore::Record>& key_records, std::vector<std::string>& notes);

// The records' JSON form (the store's and the admin API's).
std::string tenantToJson(const TenantConfig& t);
std::string keyToJson(const ApiKeyConfig& k);
// Reads a record or an admin request body. `partial`: only the fields present are set
// (an update). Errors name the field. Models are checked against `config`.
std::optional<std::string> tenantFromJson(std::string_view json, const Config& config, TenantConfig& out, bool partial);
std::optional<std::string> keyFromJson(std::string_view json, const Config& config, ApiKeyConfig& out, bool partial);

inline constexpr std::string_view kTenantRecords = "tenants";
inline constexpr std::string_view kKeyRecords = "keys";

}  // namespace tahua
