// The anthropic type's settings (config/provider_kind.h) and its public endpoint.
#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
constexpr schema::Field kOptions[] = {
    schema::nonEmpty("anthropic_version", "\"2023-06-01\"", "The `anthropic-version` header sent upstream."),
    kDefaultMaxTokensField,
};
const schema::Table kTable("providers[] (type: anthropic)",
                           "Anthropic Messages: `base_url` defaults to `https://api.anthropic.com/v1`, the key is sent as "
                           "`x-api-key`.",
                           kOptions);

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (in.has("anthropic_version")) out.anthropic_version = in.text("anthropic_version");
  if (in.has("default_max_tokens")) out.default_max_tokens = in.integer("default_max_tokens");
}

std::string defaultBaseUrl(const ProviderConfig&) { return "https://api.anthropic.com/v1"; }
}  // namespace

extern const ProviderKind kAnthropicKind{
    .type = "anthropic", .options = kOptions, .read_options = readOptions, .default_base_url = defaultBaseUrl};

}  // namespace tahua
