// The mock type's settings (config/provider_kind.h): it answers in-process, so it has no
// endpoint at all.
#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
constexpr std::string_view kOptions[] = {"mock", "stream_usage"};

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (in.has("stream_usage")) out.stream_usage = in.boolean("stream_usage");
  if (!in.has("mock")) return;
  const auto m = in.section("mock", {"completion_tokens", "chunk_delay", "embedding_dimensions"});
  if (m->has("completion_tokens")) out.mock.completion_tokens = static_cast<int>(m->integer("completion_tokens", 1, 100000));
  if (m->has("chunk_delay")) out.mock.chunk_delay = m->duration("chunk_delay");
  if (m->has("embedding_dimensions"))
    out.mock.embedding_dimensions = static_cast<int>(m->integer("embedding_dimensions", 1, 65536));
}
}  // namespace

extern const ProviderKind kMockKind{.type = "mock", .options = kOptions, .read_options = readOptions, .remote = false};

}  // namespace tahua
