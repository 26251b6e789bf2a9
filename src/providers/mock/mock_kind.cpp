// The mock type's settings (config/provider_kind.h): it answers in-process, so it has no
// endpoint at all.
#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
constexpr schema::Field kOptions[] = {
    schema::section("mock", "The shape of its answers."),
    kStreamUsageField,
};
const schema::Table kTable("providers[] (type: mock)",
                           "The built-in deterministic provider: OpenAI-format answers made in-process (no base_url, no "
                           "key), for the offline default config, tests and benchmarks.",
                           kOptions);

constexpr schema::Field kMockFields[] = {
    schema::integer("completion_tokens", 1, 100000, "16", "Content chunks per answer (one token each)."),
    schema::duration("chunk_delay", 0, "0ms", "A wait before each streamed chunk."),
    schema::integer("embedding_dimensions", 1, 65536, "8", "The length of each embedding."),
};
const schema::Table kMock("providers[] (type: mock).mock", "The mock provider's answers.", kMockFields);

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (in.has("stream_usage")) out.stream_usage = in.boolean("stream_usage");
  if (!in.has("mock")) return;
  const auto m = in.section("mock", kMock);
  if (m->has("completion_tokens")) out.mock.completion_tokens = static_cast<int>(m->integer("completion_tokens"));
  if (m->has("chunk_delay")) out.mock.chunk_delay = m->duration("chunk_delay");
  if (m->has("embedding_dimensions")) out.mock.embedding_dimensions = static_cast<int>(m->integer("embedding_dimensions"));
}
}  // namespace

extern const ProviderKind kMockKind{.type = "mock", .options = kOptions, .read_options = readOptions, .remote = false};

}  // namespace tahua
