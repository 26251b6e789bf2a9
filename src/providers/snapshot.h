// The config plus what was built from it (provider adapters, TLS contexts, egress
// proxy settings): published to every worker as one read-only unit and swapped
// atomically on reload. A request pins the snapshot it started with until it ends.
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "providers/provider.h"

namespace tahua {

// Requests hold a shared_ptr to it.
struct Snapshot {
  ConfigPtr config;
  std::vector<ProviderRuntime> providers;  // same order as config->providers
};
using SnapshotPtr = std::shared_ptr<const Snapshot>;

// Builds a snapshot (adapters, TLS contexts). Fails on unreadable CA files etc.
std::variant<SnapshotPtr, std::string> buildSnapshot(ConfigPtr config);

}  // namespace tahua
