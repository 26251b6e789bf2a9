// The vendor registry as the config loader sees it (config/provider_kind.h): every kind
// listed in vendors.h, and lookup by type name.
#include "config/provider_kind.h"

#include "providers/vendors.h"

namespace tahua {

namespace {
#define TAHUA_KIND_ADDRESS(kind, factory) &kind,
constexpr const ProviderKind* kKinds[] = {TAHUA_VENDORS(TAHUA_KIND_ADDRESS)};
#undef TAHUA_KIND_ADDRESS
}  // namespace

std::span<const ProviderKind* const> providerKinds() { return kKinds; }

const ProviderKind* findProviderKind(std::string_view type) {
  for (const ProviderKind* k : kKinds)
    if (k->type == type) return k;
  return nullptr;
}

}  // namespace tahua
