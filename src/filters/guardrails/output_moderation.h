// Moderation of answers: the `moderation` rules that inspect `output`, calling the same
// endpoint (OpenAI's /v1/moderations shape) as the request's check. A whole answer is
// checked before it is sent (the guardrail filter's onAnswer waits); a stream's text so
// far every `stream_interval` characters and once more at its end. In `pass` mode the
// text flows meanwhile (a flagged verdict cuts the stream at the next piece, or before its
// end, which waits for the last check); in `hold` mode text leaves only once a check
// passed it. Per request, owned by the guardrail filter's state; its calls' answers find
// it only while it lives.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "guardrails/rule_set.h"
#include "http/outbound_call.h"

namespace tahua {

class WorkerServices;

class OutputModeration {
 public:
  struct Rule {
    const GuardrailPolicyConfig* policy = nullptr;
    const guardrails::RuleSpec* rule = nullptr;
  };
  // What the guardrail filter does with the verdicts (records, blocks, resumes).
  class Handler {
   public:
    virtual void moderationFlagged(const Rule& r) = 0;
    // No verdict (an error, a timeout, an answer out of shape): the rule's on_error applies.
    virtual void moderationUnchecked(const Rule& r, std::string_view why) = 0;
    // A call answered, after its verdict was handled.
    virtual void moderationAnswered() = 0;

   protected:
    ~Handler() = default;
  };

  // The longest text sent per string: a longer whole answer goes as several strings, a
  // stream sends the last this many bytes of its text so far (earlier checks saw the rest).
  static constexpr std::size_t kMaxText = 32 << 10;

  OutputModeration() = default;
  OutputModeration(const OutputModeration&) = delete;
  OutputModeration& operator=(const OutputModeration&) = delete;
  ~OutputModeration();

  // Whether a policy has a moderation rule on the answer.
  static bool inspectsAnswers(const GuardrailPolicyConfig& pol);
  // Takes the attached policies' answer rules (once); false when there are none.
  bool attach(const std::vector<const GuardrailPolicyConfig*>& policies, WorkerServices& services, Handler& handler);
  bool active() const { return !monitors_.empty(); }
  std::size_t callsInFlight() const;

  // A whole answer's texts: one call per rule.
  void checkAnswer(const std::vector<std::string_view>& texts);

  // A stream: a piece of an output text (`channel`: the filter's index for it).
  void feed(std::size_t channel, std::string_view piece);
  // Starts the checks that are due: a rule with no call in flight and `stream_interval`
  // characters since its last check, or (`end`: the upstream finished) any text unchecked.
  void check(bool end);
  // The bytes of `channel` the client may have now: what the hold-mode rules (at the end,
  // every rule) checked. Not an output channel: everything.
  std::size_t gate(std::size_t channel, bool end) const;
  // Whether the stream must wait for a call in flight: a hold-mode rule's (at the end, any).
  bool busy(bool end) const;

 private:
  struct Monitor {
    Rule rule;
    bool in_flight = false, settled = false;  // settled: flagged or failed closed; no more checks
    std::size_t chars = 0;                    // characters since the last check
    std::vector<std::size_t> sent, checked;   // per channel: bytes the call in flight covers / a verdict passed
  };
  struct Text {
    std::string tail;  // the last bytes (at most 2 * kMaxText)
    std::size_t size = 0;
  };
  struct Link {
    OutputModeration* self;
  };
  void send(std::size_t m, const std::vector<std::string_view>& texts);
  void answered(std::size_t m, std::size_t inputs, const OutboundResponse& res);

  std::vector<Monitor> monitors_;
  std::vector<Text> texts_;  // by channel; an empty one is no output text
  WorkerServices* services_ = nullptr;
  Handler* handler_ = nullptr;
  std::shared_ptr<Link> link_;
};

}  // namespace tahua
