// Every vendor, once: its kind (what the config loader knows of it, in
// <vendor>/<vendor>_kind.cpp) and its adapter's factory. Adding a vendor is its folder and
// one line here. Expanded twice: the kinds alone in provider_kinds.cpp (free of Asio, so
// the config loader's fuzz target links only them), kinds with factories in provider.cpp.
#pragma once

#include "config/provider_kind.h"

#define TAHUA_VENDORS(VENDOR)                        \
  VENDOR(kOpenAIKind, makeOpenAIAdapter)             \
  VENDOR(kAzureOpenAIKind, makeAzureOpenAIAdapter)   \
  VENDOR(kAnthropicKind, makeAnthropicAdapter)       \
  VENDOR(kGeminiKind, makeGeminiAdapter)             \
  VENDOR(kBedrockKind, makeBedrockAdapter)           \
  VENDOR(kVertexKind, makeVertexAdapter)             \
  VENDOR(kMockKind, makeMockAdapter)                 \
  VENDOR(kMcpKind, makeMcpAdapter)

namespace tahua {
// Each kind is defined in its vendor's folder.
#define TAHUA_DECLARE_KIND(kind, factory) extern const ProviderKind kind;
TAHUA_VENDORS(TAHUA_DECLARE_KIND)
#undef TAHUA_DECLARE_KIND
}  // namespace tahua
