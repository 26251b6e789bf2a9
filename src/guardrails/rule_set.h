// A guardrail policy's rules compiled into one Hyperscan database (streaming mode),
// matched against folded text (text_fold.h). Hyperscan rather than RE2 alone: a streaming
// matcher carries a match across the pieces of an answer, and one database runs every
// pattern of a policy in a single pass. Hyperscan reports where a match ends; where it
// starts (what a redaction needs) comes from a second pass of RE2 over the bytes before
// the end, run only for a match (rare), instead of Hyperscan's start-of-match mode, which
// made the scan several times slower and refuses many bounded shapes. Immutable once
// compiled: every worker scans with it, each with a scratch of its own (RuleScratch).
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "guardrails/pii_detectors.h"
#include "guardrails/text_fold.h"

namespace re2 {
class RE2;
}
struct hs_database;
struct hs_scratch;
struct hs_stream;

namespace tahua::guardrails {

// What a rule looks at.
enum Target : std::uint8_t {
  kInput = 1,             // the request's messages (user, assistant, tool results)
  kSystem = 2,            // system / developer messages, Anthropic's `system`, Responses' `instructions`
  kToolArguments = 4,     // tool-call arguments in the request's history
  kOutput = 8,            // the answer's text
  kOutputToolCalls = 16,  // the answer's tool-call arguments
};
constexpr std::uint8_t kRequestTargets = kInput | kSystem | kToolArguments;
constexpr std::uint8_t kAnswerTargets = kOutput | kOutputToolCalls;

enum class Action : std::uint8_t { Flag, Redact, Block };  // in order of precedence
std::string_view actionName(Action a);

// An external detector: a moderation endpoint in the shape of OpenAI's POST
// /v1/moderations ({model, input: [texts]} -> {results: [{flagged, categories,
// category_scores}]}), called by the guardrail filter for the request's text and, with
// `inspect: [output]`, for the answer's (filters/guardrails/output_moderation.h).
struct ModerationSpec {
  std::string url;      // http(s)://host[:port]/v1/moderations
  std::string model;    // sent as `model` ("" : not sent)
  std::string api_key;  // sent as a bearer token ("" : none)
  long long timeout_ms = 2000;
  bool fail_closed = false;  // no answer in time (or a bad one): refuse the request (else let it pass)
  std::vector<std::string> categories;  // flagged only for these ("" : the endpoint's own `flagged`)
  double threshold = 0.5;               // with categories: a category score at or above this flags
  // Streamed answers: the text so far is checked every `stream_interval` characters (and
  // at the end); `stream_hold` releases text to the client only once a check passed it.
  std::size_t stream_interval = 500;
  bool stream_hold = false;
};

// The answer-quality check: the prompt (the request's last user message) and the answer's
// text embedded by one of the gateway's own models; a cosine similarity below `threshold`
// makes a hit. Not a text rule: it looks at no target and is run by the guardrail filter.
struct QualitySpec {
  std::string embedding_model;  // a model of the gateway (providers/embedding_call.h)
  double threshold = 0.35;
  double sample = 1.0;          // the share of answers checked
  long long timeout_ms = 2000;  // the embedding call's
};

struct RuleSpec {
  std::string name;
  std::uint8_t targets = kInput | kOutput;
  Action action = Action::Flag;
  std::string mask = "[REDACTED]";
  std::size_t max_match_chars = 256;  // bytes of UTF-8: the longest match kept whole, and a stream's hold-back
  enum class Detector : std::uint8_t { Patterns, Pii, Injection, Moderation, Quality } detector = Detector::Patterns;
  std::vector<std::string> patterns;  // Hyperscan regexes
  std::vector<std::string> literals;  // matched as they are
  bool caseless = false;
  std::vector<PiiKind> pii;
  double threshold = 0.5;  // injection: the score that makes a hit
  std::vector<std::string> allow;  // injection: phrases (folded, ASCII lower-case) no signal may use
  bool explain = false;            // injection: a block's message names the score and signals
  ModerationSpec moderation;
  QualitySpec quality;
};

// A validated match of rule `rule` over bytes [begin, end) of the original text.
struct RuleHit {
  std::uint16_t rule = 0;
  std::size_t begin = 0, end = 0;
};

// An injection rule's reading of one text (scores above 0 only): its score and the signals
// that counted (numbers for injectionSignalName).
struct InjectionReading {
  std::uint16_t rule = 0;
  double score = 0;
  std::vector<std::uint16_t> signals;
};

// Folds an allow-list phrase as texts are folded, ASCII lower-cased (how it is matched).
std::string foldedPhrase(std::string_view phrase);

// Sorts hits by (rule, begin) and merges those of one rule that overlap or touch.
void mergeHits(std::vector<RuleHit>& hits);

// Hyperscan's per-thread working memory, grown to fit every database it scanned with.
class RuleScratch {
 public:
  RuleScratch() = default;
  RuleScratch(const RuleScratch&) = delete;
  RuleScratch& operator=(const RuleScratch&) = delete;
  ~RuleScratch();
  hs_scratch* forDatabase(const hs_database* db);

 private:
  hs_scratch* scratch_ = nullptr;
  std::vector<const hs_database*> fitted_;
};

class RuleSet {
 public:
  // Null and `error` ("rule \"name\": why") when a pattern is refused.
  // Whether the injection signals compiled (a unit test checks they do).
  static bool injectionSignalsCompile();
  static std::shared_ptr<const RuleSet> compile(std::vector<RuleSpec> rules, std::string& error);
  ~RuleSet();

  const std::vector<RuleSpec>& rules() const { return rules_; }
  std::uint8_t targets() const { return targets_; }  // every rule's, together
  bool anyAction(std::uint8_t targets, Action a) const;

  // Every validated match in `text`, of rules looking at one of `targets`, appended to
  // `out` (offsets into `text`; unmerged). An injection rule's hit is the whole text, when
  // its score reaches the threshold; `readings` (if given) gets every score above 0.
  void scanText(std::string_view text, RuleScratch& scratch, std::uint8_t targets, std::vector<RuleHit>& out,
                std::vector<InjectionReading>* readings = nullptr) const;
  std::vector<RuleHit> scanText(std::string_view text, RuleScratch& scratch, std::uint8_t targets = 0xff) const {
    std::vector<RuleHit> out;
    scanText(text, scratch, targets, out);
    return out;
  }

  // Bytes of folded text a stream holds back for rules of `targets`: the longest match
  // one can make, at most its max_match_chars.
  std::size_t holdBack(std::uint8_t targets) const;
  // Per expression of the rules of `targets` (a literal, a PII shape, a regex): the bytes
  // its matches can contain (known for literals and PII shapes; all for a regex) and its
  // longest match. A stream holds back, per expression, only the trailing run of its
  // bytes (a match still growing lies within it), at most its longest match.
  struct HoldShape {
    std::bitset<256> bytes;
    std::size_t width;
  };
  std::vector<HoldShape> holdShapes(std::uint8_t targets) const;

 private:
  friend class TextStream;
  struct PatternRef {
    std::uint16_t rule;
    bool (*valid)(std::string_view);
    double weight;  // injection signals
    bool whole_run;  // a number (PiiShape::whole_run)
  };
  RuleSet();
  // Whether the match [begin, end) of pattern `id` in `text` counts (Unknown: a number
  // the text still to come may continue; `complete`: none comes). A number may move
  // `begin` later, to where a run of its own starts.
  RunVerdict judge(unsigned id, std::uint8_t targets, std::string_view text, std::size_t& begin, std::size_t end,
                   bool complete) const;
  // Whether pattern `id` matches exactly text[begin, end).
  bool matchesFrom(unsigned id, std::string_view text, std::size_t begin, std::size_t end) const;
  // Where the match of pattern `id` that ends at `to` starts, in `text` (not before
  // `floor`): Hyperscan's `from`, or the second pass.
  std::size_t startOf(unsigned id, std::string_view text, std::size_t floor, std::size_t from, std::size_t to) const;

  std::vector<RuleSpec> rules_;
  std::vector<PatternRef> refs_;            // by Hyperscan id
  std::vector<std::size_t> width_;          // per rule: longest match (bytes), capped
  std::vector<std::unique_ptr<re2::RE2>> starts_;  // by id: the start-finding pass
  std::vector<std::pair<std::uint16_t, HoldShape>> shapes_;  // per expression, with its rule
  hs_database* db_ = nullptr;
  std::uint8_t targets_ = 0;
  std::uint8_t injection_rules_ = 0;  // the targets of injection rules
  void scanInjection(std::string_view subject, const FoldStats& stats, RuleScratch& scratch, std::uint8_t targets,
                     std::size_t text_size, std::vector<RuleHit>& out, std::vector<InjectionReading>* readings) const;
};

// One text arriving in pieces (a choice's answer, a tool call's arguments): matches
// found across pieces, in original offsets from the text's start. Keeps only the folded
// tail a match can still reach.
class TextStream {
 public:
  TextStream(std::shared_ptr<const RuleSet> rules, std::uint8_t targets);
  TextStream(TextStream&&) noexcept;
  TextStream& operator=(TextStream&&) = delete;
  TextStream(const TextStream&) = delete;
  ~TextStream();

  void feed(std::string_view piece, RuleScratch& scratch, std::vector<RuleHit>& out);
  // The text is complete: matches that needed to see its end.
  void close(RuleScratch& scratch, std::vector<RuleHit>& out);
  // Original bytes before this offset can no longer be part of a new match: a match still
  // growing started at most hold_ bytes back, and (when the rules' bytes are known) within
  // the trailing run of bytes a match can contain.
  std::size_t safeEnd() const;
  std::size_t size() const { return orig_size_; }
  bool closed() const { return closed_; }

 private:
  struct Raw {
    unsigned id;
    unsigned long long from, to;
  };
  void collect(std::vector<RuleHit>& out);
  static int onMatch(unsigned id, unsigned long long from, unsigned long long to, unsigned flags, void* ctx);

  std::shared_ptr<const RuleSet> rules_;
  std::uint8_t targets_;
  hs_stream* stream_ = nullptr;
  std::size_t hold_ = 0;  // the longest match (+1 for a \\b that needs the next byte)
  std::vector<RuleSet::HoldShape> shapes_;
  std::size_t held_ = 0;  // folded bytes held back now (updated as text comes)
  void updateHold();
  std::string folded_;                  // folded bytes from fbase_
  std::vector<std::uint32_t> origin_;  // their original offsets
  std::size_t fbase_ = 0;
  std::size_t orig_size_ = 0;
  FoldStats stats_;
  std::vector<Raw> raw_;
  std::vector<Raw> pending_;  // numbers whose run may go on in the next piece (from: their start)
  bool closed_ = false;
};

}  // namespace tahua::guardrails
