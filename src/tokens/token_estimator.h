// Token counting for budgets, rate limits and usage when the provider reports none.
//
// Callers depend on TokenCounter only, so an exact BPE tokenizer (per model family) can
// replace the estimator without touching them. The estimator approximates OpenAI's
// cl100k_base; other vocabularies (o200k, Claude's, Gemini's) differ by roughly ±15% on
// English and more on other scripts, which is within what an estimate is used for.
#pragma once

#include <cstdint>
#include <string_view>

#include <boost/json/object.hpp>

namespace tahua {

class TokenCounter {
 public:
  virtual ~TokenCounter() = default;
  // Tokens `text` encodes to. Any bytes are accepted (invalid UTF-8 included).
  virtual std::int64_t count(std::string_view text) const = 0;
};

// A single-pass, allocation-free heuristic (see the .cpp for the rules and their
// calibration). Thread-safe: it holds no state.
class EstimatingTokenCounter final : public TokenCounter {
 public:
  std::int64_t count(std::string_view text) const override;
};

// The counter used when no model-specific tokenizer is configured (the estimator).
const TokenCounter& defaultTokenCounter();

// An OpenAI chat-completions request's prompt: messages (text parts, names, tool call
// names and arguments, tool results), tool definitions and per-message overheads.
// Malformed fields are skipped, never an error: this is an estimate, validation is
// someone else's job.
std::int64_t estimateChatTokens(const boost::json::object& request, const TokenCounter& counter);
std::int64_t estimateChatTokens(const boost::json::object& request);

// An Anthropic Messages request's prompt: system (string or text blocks), messages
// (string or blocks: text, tool_use input, tool_result content, images as a fixed
// amount, thinking), tool definitions.
std::int64_t estimateAnthropicTokens(const boost::json::object& request, const TokenCounter& counter);
std::int64_t estimateAnthropicTokens(const boost::json::object& request);

// The text a piece of a streamed answer carries, in any client API's event format (the
// string values of "content", "text", "delta", "arguments", "partial_json", "thinking",
// "refusal"), as tokens: what a limit counts while a stream runs. A value split across
// two pieces is counted up to the split; the usage reported at the end is what is billed.
std::int64_t estimateStreamedTokens(std::string_view piece, const TokenCounter& counter);

}  // namespace tahua
