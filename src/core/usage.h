// Token counts of one answer, as the provider reported them (or the gateway estimated
// when it reported none). One struct for every layer: the codecs read it from each
// vendor's usage object and write it in each client API's shape, the relay meters it,
// the access log and metrics report it.
#pragma once

#include <cstdint>

namespace tahua {

struct Usage {
  std::int64_t prompt_tokens = -1;  // -1: not reported. Cached prompt tokens included
  std::int64_t completion_tokens = -1;
  std::int64_t total_tokens = -1;
  std::int64_t cached_tokens = -1;  // of prompt_tokens, served from the provider's prompt cache
  bool present() const { return prompt_tokens >= 0 || completion_tokens >= 0 || total_tokens >= 0; }
};

}  // namespace tahua
