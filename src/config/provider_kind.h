// A provider type as the config loader knows it: its name, the settings only it takes (as
// documented fields: each vendor registers its table for the configuration reference) and
// how to read them, its public endpoint. The loader holds no list of vendors: each vendor's
// folder defines its kind (src/providers/<vendor>/<vendor>_kind.cpp, free of Asio, so the
// config loader's fuzz target links it) and src/providers/vendors.h lists every vendor
// once, kind and adapter factory on one line.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/field_table.h"
#include "core/duration.h"

namespace tahua {

struct ProviderConfig;

// A vendor's settings in one provider's YAML mapping (or in a mapping nested in it), read
// by the loader's own checks: a wrong value fails the load with "file:line:col: field:
// message", as every other field does. Numbers and durations are bounded by their field
// (the kind's `options`, or the table a section was opened with).
class ProviderOptions {
 public:
  virtual ~ProviderOptions() = default;
  virtual bool has(std::string_view key) const = 0;
  virtual std::string text(std::string_view key) const = 0;  // a non-empty string
  virtual std::int64_t integer(std::string_view key) const = 0;
  virtual bool boolean(std::string_view key) const = 0;
  virtual Millis duration(std::string_view key) const = 0;
  // A list of non-empty strings (a List field).
  virtual std::vector<std::string> strings(std::string_view key) const = 0;
  // The mapping at `key`, with only `table`'s fields.
  virtual std::unique_ptr<ProviderOptions> section(std::string_view key, const schema::Table& table) const = 0;
  // Fails the load at `key` (at this mapping when the key is absent: "required").
  [[noreturn]] virtual void fail(std::string_view key, const std::string& message) const = 0;
  // A load warning (e.g. an unset credential variable).
  virtual void warn(const std::string& message) const = 0;
};

struct ProviderKind {
  std::string_view type;                   // `type:` in the config
  std::span<const schema::Field> options;  // the fields only this type takes (its table in the reference)
  // Reads them into the provider's config; null: the type has none.
  void (*read_options)(const ProviderOptions& in, ProviderConfig& out) = nullptr;
  // The vendor's public endpoint, used when base_url is not set; null: base_url is required.
  std::string (*default_base_url)(const ProviderConfig& provider) = nullptr;
  // False for an in-process provider (mock): no base_url, no connection, no proxy.
  bool remote = true;
  // Set when the type takes no api_key / api_key_env: the error that says why.
  const char* api_key_refused = nullptr;
};

// Fields several vendors take, described once.
inline constexpr schema::Field kStreamUsageField = schema::boolean(
    "stream_usage", "true",
    "OpenAI-format streams: ask for usage upstream (`stream_options.include_usage`), meter it and cut it out of the "
    "stream of a client that did not ask; false for a server that refuses stream_options.");
inline constexpr schema::Field kTokenWaitField = schema::duration(
    "token_wait", 100, "10s",
    "How long a request waits for the credential's first access token (at start) before it is a 503 saying why; once "
    "a token has expired unreplaced, requests fail at once.");
inline constexpr schema::Field kDefaultMaxTokensField = schema::integer(
    "default_max_tokens", 1, 10'000'000, "4096", "`max_tokens` sent upstream when the client sent none (the vendor requires one).");

// Every vendor's kind, in src/providers/vendors.h's order (defined in
// src/providers/provider_kinds.cpp).
std::span<const ProviderKind* const> providerKinds();
const ProviderKind* findProviderKind(std::string_view type);

}  // namespace tahua
