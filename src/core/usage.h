// Token counts of one answer, as the provider reported them (or the gateway estimated
// when it reported none). One struct for every layer: the codecs read it from each
// vendor's usage object and write it in each client API's shape, the relay meters it,
// the access log and metrics report it.
#pragma once

#include <cstdint>
#include <string_view>

namespace tahua {

// Why the answer ended, in OpenAI's words (a trace's gen_ai.response.finish_reasons).
enum class FinishReason : std::uint8_t { None, Stop, Length, ToolCalls, ContentFilter, Other };

inline std::string_view finishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::ToolCalls: return "tool_calls";
    case FinishReason::ContentFilter: return "content_filter";
    case FinishReason::Other: return "other";
    case FinishReason::None: break;
  }
  return "";
}

// A vendor's word for it: OpenAI's finish_reason, Anthropic's stop_reason.
inline FinishReason finishReasonFrom(std::string_view v) {
  if (v == "stop" || v == "end_turn" || v == "stop_sequence") return FinishReason::Stop;
  if (v == "length" || v == "max_tokens") return FinishReason::Length;
  if (v == "tool_calls" || v == "tool_use" || v == "function_call") return FinishReason::ToolCalls;
  if (v == "content_filter" || v == "refusal") return FinishReason::ContentFilter;
  return v.empty() ? FinishReason::None : FinishReason::Other;
}

struct Usage {
  std::int64_t prompt_tokens = -1;  // -1: not reported. Cached prompt tokens included
  std::int64_t completion_tokens = -1;
  std::int64_t total_tokens = -1;
  std::int64_t cached_tokens = -1;  // of prompt_tokens, served from the provider's prompt cache
  std::int64_t images = -1;         // images made (/v1/images/generations, edits), priced per image
  double audio_seconds = -1;        // audio transcribed or translated, priced per second
  std::int64_t characters = -1;     // text spoken (/v1/audio/speech `input`), priced per character
  FinishReason finish = FinishReason::None;  // as the answer said (first choice)
  bool batch = false;  // run in a batch: priced at the model's batch prices, when it has them
  bool present() const { return prompt_tokens >= 0 || completion_tokens >= 0 || total_tokens >= 0; }
  // Tokens, or a unit priced besides them: what the answer costs is known.
  bool metered() const { return present() || images >= 0 || audio_seconds >= 0 || characters >= 0; }
};

}  // namespace tahua
