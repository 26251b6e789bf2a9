// The azure-openai type's settings (config/provider_kind.h): the api-version query
// parameter every request carries is required; base_url is the resource's endpoint.
#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
constexpr schema::Field kOptions[] = {
    schema::nonEmpty("api_version", "", "The `api-version` query parameter every request carries (e.g. \"2024-10-21\").")
        .needed(),
    kStreamUsageField,
};
const schema::Table kTable("providers[] (type: azure-openai)",
                           "Azure OpenAI: `base_url` is the resource's endpoint (`https://RESOURCE.openai.azure.com/openai`), "
                           "a model's `upstream_model` the Azure deployment; the key is sent as `api-key`.",
                           kOptions);

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (!in.has("api_version")) in.fail("api_version", "required for type azure-openai (e.g. \"2024-10-21\")");
  out.api_version = in.text("api_version");
  if (out.api_version.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") != std::string::npos)
    in.fail("api_version", "unexpected characters");
  if (in.has("stream_usage")) out.stream_usage = in.boolean("stream_usage");
}
}  // namespace

extern const ProviderKind kAzureOpenAIKind{.type = "azure-openai", .options = kOptions, .read_options = readOptions};

}  // namespace tahua
