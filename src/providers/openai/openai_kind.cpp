// The openai type's settings (config/provider_kind.h). Its endpoint has no default:
// OpenAI-compatible servers are everywhere, so base_url is required.
#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
constexpr schema::Field kOptions[] = {kStreamUsageField};
const schema::Table kTable("providers[] (type: openai)",
                           "OpenAI and every OpenAI-compatible server (vLLM, Ollama, llama.cpp server, DeepSeek, Mistral, "
                           "Groq, ...): `base_url` is required, the key is sent as `Authorization: Bearer`.",
                           kOptions);

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (in.has("stream_usage")) out.stream_usage = in.boolean("stream_usage");
}
}  // namespace

extern const ProviderKind kOpenAIKind{.type = "openai", .options = kOptions, .read_options = readOptions};

}  // namespace tahua
