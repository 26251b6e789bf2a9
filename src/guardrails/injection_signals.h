// Prompt-injection heuristics: phrases that try to override the instructions, role-play
// jailbreak markers, fake role headers, in English and Chinese, each with a weight. A
// rule with the `injection` detector adds the weights of the distinct signals a text
// shows (and of hidden-text tricks: invisible characters, Unicode tags, long base64
// blobs) and matches when the sum reaches its threshold. Measured against the corpus in
// tests/guardrails/ (docs/guardrails.md).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace tahua::guardrails {

struct InjectionSignal {
  const char* name;     // what the records and logs call it
  const char* pattern;  // Hyperscan syntax, matched caseless on folded text
  double weight;
  // Everyday uses of the phrase (RE2, caseless, on the same bytes): an occurrence the text
  // goes on with `then` (from the end of its word), or that ends a match of `ending`,
  // does not count. A signal counts when one of its occurrences is not excused.
  const char* then = nullptr;
  const char* ending = nullptr;
};
std::span<const InjectionSignal> injectionSignals();

// Hidden-text signals, from folding (text_fold.h), numbered after the phrase signals.
constexpr double kInvisibleWeight = 0.6;  // three or more zero-width characters
constexpr std::size_t kInvisibleCount = 3;
constexpr double kTagWeight = 1.0;        // any Unicode tag character
inline std::size_t invisibleSignal() { return injectionSignals().size(); }
inline std::size_t tagSignal() { return injectionSignals().size() + 1; }
// A signal's name by its number (phrase or hidden-text signal).
std::string_view injectionSignalName(std::size_t id);

}  // namespace tahua::guardrails
