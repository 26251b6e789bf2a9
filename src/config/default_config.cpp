#include "config/config.h"

namespace tahua {

// Works offline and without keys, so the first README command always starts a useful
// gateway. Real providers are added with --config (see config/tahua.example.yaml).
std::string_view defaultConfigYaml() {
  return R"yaml(
server:
  workers: 0
listeners:
  - address: 127.0.0.1
    port: 8080
access_log:
  enabled: true
  path: "-"
providers:
  - name: mock
    type: mock
    mock:
      completion_tokens: 16
      chunk_delay: 20ms
      embedding_dimensions: 8
models:
  - name: mock-gpt
    provider: mock
  - name: mock-embedding
    provider: mock
)yaml";
}

}  // namespace tahua
