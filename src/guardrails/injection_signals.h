// Prompt-injection heuristics: phrases that try to override the instructions, role-play
// jailbreak markers, fake role headers, in English and Chinese, each with a weight. A
// rule with the `injection` detector adds the weights of the distinct signals a text
// shows (and of hidden-text tricks: invisible characters, Unicode tags, long base64
// blobs) and matches when the sum reaches its threshold. Measured against the corpus in
// tests/guardrails/ (README "Guardrails").
#pragma once

#include <span>

namespace tahua::guardrails {

struct InjectionSignal {
  const char* pattern;  // Hyperscan syntax, matched caseless on folded text
  double weight;
};
std::span<const InjectionSignal> injectionSignals();

// Hidden-text signals, from folding (text_fold.h).
constexpr double kInvisibleWeight = 0.6;  // three or more zero-width characters
constexpr std::size_t kInvisibleCount = 3;
constexpr double kTagWeight = 1.0;        // any Unicode tag character

}  // namespace tahua::guardrails
