// The openai type's settings (config/provider_kind.h). Its endpoint has no default:
// OpenAI-compatible servers are everywhere, so base_url is required. Which of OpenAI's
// APIs the server serves itself is its `apis` list: no vendor is known by name here.
#include <string>

#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
constexpr schema::Field kOptions[] = {
    kStreamUsageField,
    schema::list("apis", "[chat, completions, embeddings, moderations, images, audio, rerank, files, realtime]",
                 "The APIs the server serves itself, passed through (names: chat, completions, embeddings, responses, "
                 "moderations, images, audio, rerank, files (with batches), realtime). The others: /v1/responses and "
                 "/v1/messages are translated to chat completions (tahua keeps the Responses state), the rest answer 400. "
                 "`responses` is not in the default: most OpenAI-compatible servers lack /v1/responses, and a translated "
                 "request works with all of them; list it for OpenAI itself (its built-in tools, background mode and "
                 "reasoning items)."),
};
const schema::Table kTable("providers[] (type: openai)",
                           "OpenAI and every OpenAI-compatible server (vLLM, Ollama, llama.cpp server, DeepSeek, Mistral, "
                           "Groq, ...): `base_url` is required, the key is sent as `Authorization: Bearer`.",
                           kOptions);

// The `apis` list as ProviderApi bits; an unknown or repeated name fails the load.
std::uint16_t readApis(const ProviderOptions& in) {
  std::uint16_t bits = 0;
  for (const std::string& name : in.strings("apis")) {
    std::size_t i = 0;
    while (i < std::size(kProviderApiNames) && kProviderApiNames[i] != name) ++i;
    if (i == std::size(kProviderApiNames)) {
      std::string known;
      for (std::string_view n : kProviderApiNames) known.append(known.empty() ? "" : ", ").append(n);
      in.fail("apis", "unknown API \"" + name + "\" (" + known + ")");
    }
    const auto bit = static_cast<std::uint16_t>(1u << i);
    if (bits & bit) in.fail("apis", "\"" + name + "\" is listed twice");
    bits |= bit;
  }
  if (bits == 0) in.fail("apis", "must name at least one API");
  return bits;
}

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (in.has("stream_usage")) out.stream_usage = in.boolean("stream_usage");
  if (in.has("apis")) out.apis = readApis(in);
}
}  // namespace

extern const ProviderKind kOpenAIKind{.type = "openai", .options = kOptions, .read_options = readOptions};

}  // namespace tahua
