// The anthropic type's settings (config/provider_kind.h) and its public endpoint.
#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
constexpr std::string_view kOptions[] = {"anthropic_version", "default_max_tokens"};

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (in.has("anthropic_version")) out.anthropic_version = in.text("anthropic_version");
  if (in.has("default_max_tokens")) out.default_max_tokens = in.integer("default_max_tokens", 1, 10'000'000);
}

std::string defaultBaseUrl(const ProviderConfig&) { return "https://api.anthropic.com/v1"; }
}  // namespace

extern const ProviderKind kAnthropicKind{
    .type = "anthropic", .options = kOptions, .read_options = readOptions, .default_base_url = defaultBaseUrl};

}  // namespace tahua
