// A Lua plugin as the config declares it (a `plugins:` entry or a `Plugin` resource):
// its manifest, and its code compiled by the loader, off the workers (docs/plugins.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/duration.h"

namespace tahua {

// The phases a plugin implements, as bits, and the Lua functions that implement them.
enum PluginPhase : std::uint8_t {
  kPluginRequest = 1,          // on_request(req): before limits and the upstream; may deny, set headers and body fields
  kPluginResponseHeaders = 2,  // on_response_headers(resp)
  kPluginStreamEvent = 4,      // on_stream_event(ev): rewrite, drop or add events
  kPluginComplete = 8,         // on_complete(info): sees the outcome and usage
  kPluginAuth = 16,            // on_auth(req): a link of auth.chains; may authenticate (tenant, key) or deny
};

constexpr std::uint8_t kPluginPhaseBits[] = {kPluginRequest, kPluginResponseHeaders, kPluginStreamEvent, kPluginComplete, kPluginAuth};
constexpr std::size_t kPluginPhases = std::size(kPluginPhaseBits);

// The Lua function implementing a phase bit ("on_request", ...); null for others.
constexpr const char* pluginPhaseFunction(std::uint8_t phase) {
  switch (phase) {
    case kPluginRequest: return "on_request";
    case kPluginResponseHeaders: return "on_response_headers";
    case kPluginStreamEvent: return "on_stream_event";
    case kPluginComplete: return "on_complete";
    case kPluginAuth: return "on_auth";
    default: return nullptr;
  }
}

// The phase named `name` in a manifest ("request", ...); 0 if unknown.
constexpr std::uint8_t pluginPhaseNamed(std::string_view name) {
  if (name == "request") return kPluginRequest;
  if (name == "response_headers") return kPluginResponseHeaders;
  if (name == "stream_event") return kPluginStreamEvent;
  if (name == "complete") return kPluginComplete;
  if (name == "auth") return kPluginAuth;
  return 0;
}

struct PluginSupports {
  std::vector<std::string> models;   // shell globs over the routed model's name; empty: any
  std::uint32_t endpoints = 0;       // bit per Endpoint value (request_context.h); 0: any
  std::vector<std::pair<std::string, std::vector<std::string>>> headers;  // lower-case name, values ("*": present)
  std::vector<std::string> tenants;  // names; empty: any
  std::vector<std::string> keys;     // key names; empty: any
};

// A fixture of the manifest's `tests:`, run against on_request (or on_auth) when the
// plugin is loaded: a version whose tests fail is refused (the last good one keeps running).
struct PluginTest {
  std::string name;
  std::uint8_t phase = kPluginRequest;  // kPluginRequest or kPluginAuth
  // The request (its routed model, path, headers, body as JSON text, caller).
  std::string model = "test-model";
  std::string path = "/v1/chat/completions";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // "" : {"model": model, "messages": [{"role": "user", "content": "hi"}]}
  std::string tenant;
  std::string key;
  // What the call must do.
  bool expect_deny = false;
  bool expect_authenticate = false;  // on_auth: req:authenticate(expect_tenant, expect_key)
  std::string expect_tenant;
  std::string expect_key;             // with expect_authenticate: "" = none named
  int expect_status = 0;     // with expect_deny: 0 = any
  std::string expect_code;   // with expect_deny: "" = any
  std::vector<std::pair<std::string, std::string>> expect_headers;  // upstream headers it sets
  std::vector<std::pair<std::string, std::string>> expect_fields;   // body field path -> JSON value after it
};

// tahua.http: the hosts a plugin may call, and the bounds of a call.
struct PluginHttpConfig {
  std::vector<std::pair<std::string, std::string>> allow;  // lower-case host, port ("" : any)
  Millis timeout{2'000};                   // the longest a call may take (a call may ask for less)
  std::size_t max_response_bytes = 64 << 10;
  std::uint32_t breaker_failures = 5;      // failures in a row (no answer or 5xx) that open a host's breaker
  Millis breaker_cooldown{30'000};
};

// A canary version of another plugin: for `percent` of requests it runs instead of the
// plugin `of` (which runs for the rest). Which side a request is on is a hash of
// `sticky_header` (else the client's API key, else the request id), so a user stays on
// one side, on every replica.
struct PluginCanaryConfig {
  std::string of;  // the stable plugin's id; empty: not a canary
  double percent = 0;
  std::string sticky_header;  // lower case; empty: the API key
};

struct PluginConfig {
  std::string id;
  std::string version;
  int order = 100;                 // lower runs first (ties: config order)
  std::uint8_t phases = 0;         // PluginPhase bits: the functions the code defines
  PluginSupports supports;
  std::size_t memory_bytes = 1 << 20;
  std::chrono::microseconds cpu{50'000};
  std::chrono::microseconds slice{1'000};
  bool fail_closed = false;        // a failed call refuses the request (else: as if the plugin were not there)
  bool kv_shared = false;
  PluginHttpConfig http;           // no `allow`: no tahua.http
  PluginCanaryConfig canary;          // tahua.kv.shared: the key-value namespace shared by the plugins that opt in
  std::uint32_t breaker_failures = 5;  // consecutive failures that open the plugin's breaker
  Millis breaker_cooldown{30'000};
  std::vector<PluginTest> tests;
  std::string origin;              // the file (or resource) it came from, for logs
  std::shared_ptr<const std::string> bytecode;  // the compiled chunk
};

// What the config loader asks of the plugins layer for every plugin it reads, on its own
// thread (defined in plugins/plugin_code.cpp and plugins/plugin_selftest.cpp, so config/
// includes nothing above it):
// - compiles `source`, instantiates it once within the plugin's budgets and sets
//   plugin.bytecode and plugin.phases; "" or the error ("id:line: message").
std::string compilePlugin(PluginConfig& plugin, std::string_view source);
// - runs plugin.tests against on_request; "" or the first failure.
std::string runPluginTests(const PluginConfig& plugin);

}  // namespace tahua
