// Every vendor, once: its kind (what the config loader knows of it, in
// <vendor>/<vendor>_kind.cpp) and its adapter's factory. Adding a vendor is its folder and
// one line here. Expanded twice: the kinds alone in provider_kinds.cpp (free of Asio, so
// the config loader's fuzz target links only them), kinds with factories in provider.cpp.
#pragma once

#define TAHUA_VENDORS(VENDOR)                        \
  VENDOR(kOpenAIKind, makeOpenAIAdapter)             \
  VENDOR(kAzureOpenAIKind, makeAzureOpenAIAdapter)   \
  VENDOR(kAnthropicKind, makeAnthropicAdapter)       \
  VENDOR(kGeminiKind, makeGeminiAdapter)             \
  VENDOR(kBedrockKind, makeBedrockAdapter)           \
  VENDOR(kMockKind, makeMockAdapter)
