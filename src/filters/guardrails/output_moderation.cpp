#include "filters/guardrails/output_moderation.h"

#include <algorithm>

#include "core/utf8.h"
#include "filters/guardrails/moderation_call.h"
#include "filters/worker_services.h"

namespace tahua {

namespace {

constexpr std::size_t kNoLimit = static_cast<std::size_t>(-1);

std::size_t characters(std::string_view s) {
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

bool onAnswers(const guardrails::RuleSpec& r) {
  return r.detector == guardrails::RuleSpec::Detector::Moderation && (r.targets & guardrails::kOutput);
}

}  // namespace

OutputModeration::~OutputModeration() {
  if (link_) link_->self = nullptr;  // answers still to come find nothing
}

bool OutputModeration::inspectsAnswers(const GuardrailPolicyConfig& pol) {
  const auto& rules = pol.rules->rules();
  return std::any_of(rules.begin(), rules.end(), onAnswers);
}

bool OutputModeration::attach(const std::vector<const GuardrailPolicyConfig*>& policies, WorkerServices& services, Handler& handler) {
  if (link_) return active();
  link_ = std::make_shared<Link>(Link{this});
  services_ = &services;
  handler_ = &handler;
  for (const GuardrailPolicyConfig* pol : policies)
    for (const auto& rule : pol->rules->rules())
      if (onAnswers(rule)) {
        Monitor& m = monitors_.emplace_back();
        m.rule = Rule{pol, &rule};
      }
  return active();
}

std::size_t OutputModeration::callsInFlight() const {
  return static_cast<std::size_t>(std::count_if(monitors_.begin(), monitors_.end(), [](const Monitor& m) { return m.in_flight; }));
}

void OutputModeration::checkAnswer(const std::vector<std::string_view>& texts) {
  // Every byte is checked: a long text goes in pieces of at most kMaxText.
  std::vector<std::string_view> pieces;
  for (std::string_view t : texts)
    while (!t.empty()) {
      std::size_t n = utf8Floor(t, kMaxText);
      if (n == 0) n = std::min(t.size(), kMaxText);  // not UTF-8: cut anyway
      pieces.push_back(t.substr(0, n));
      t.remove_prefix(n);
    }
  if (pieces.empty()) return;
  for (std::size_t m = 0; m < monitors_.size(); ++m) send(m, pieces);
}

void OutputModeration::feed(std::size_t channel, std::string_view piece) {
  if (!active() || piece.empty()) return;
  if (texts_.size() <= channel) texts_.resize(channel + 1);
  Text& t = texts_[channel];
  t.tail.append(piece);
  t.size += piece.size();
  if (t.tail.size() > 2 * kMaxText) t.tail.erase(0, utf8Floor(t.tail, t.tail.size() - kMaxText));
  const std::size_t n = characters(piece);
  for (Monitor& m : monitors_) m.chars += n;
}

void OutputModeration::check(bool end) {
  for (std::size_t i = 0; i < monitors_.size(); ++i) {
    Monitor& m = monitors_[i];
    if (m.in_flight || m.settled) continue;
    m.checked.resize(texts_.size(), 0);
    bool unchecked = false;
    for (std::size_t c = 0; c < texts_.size(); ++c) unchecked = unchecked || texts_[c].size > m.checked[c];
    if (!unchecked || (!end && m.chars < m.rule.rule->moderation.stream_interval)) continue;
    std::vector<std::string_view> texts;
    m.sent.assign(texts_.size(), 0);
    for (std::size_t c = 0; c < texts_.size(); ++c) {
      const Text& t = texts_[c];
      m.sent[c] = t.size;
      if (t.size == 0) continue;
      const std::string_view tail = t.tail;
      const std::size_t from = tail.size() > kMaxText ? utf8Floor(tail, tail.size() - kMaxText) : 0;
      texts.push_back(tail.substr(from));
    }
    m.chars = 0;
    send(i, texts);
  }
}

std::size_t OutputModeration::gate(std::size_t channel, bool end) const {
  if (channel >= texts_.size() || texts_[channel].size == 0) return kNoLimit;
  std::size_t gate = kNoLimit;
  for (const Monitor& m : monitors_)
    if (!m.settled && (end || m.rule.rule->moderation.stream_hold)) gate = std::min(gate, channel < m.checked.size() ? m.checked[channel] : 0);
  return gate;
}

bool OutputModeration::busy(bool end) const {
  return std::any_of(monitors_.begin(), monitors_.end(),
                     [&](const Monitor& m) { return m.in_flight && (end || m.rule.rule->moderation.stream_hold); });
}

void OutputModeration::send(std::size_t m, const std::vector<std::string_view>& texts) {
  auto call = guardrail_moderation::request(monitors_[m].rule.rule->moderation, texts);
  if (!call) return;  // checked when the config loaded
  monitors_[m].in_flight = true;
  const std::size_t inputs = texts.size();
  services_->fetch(std::move(*call), [link = link_, m, inputs](OutboundResponse res) {
    if (link->self) link->self->answered(m, inputs, res);
  });
}

void OutputModeration::answered(std::size_t i, std::size_t inputs, const OutboundResponse& res) {
  Monitor& m = monitors_[i];
  m.in_flight = false;
  const guardrails::ModerationSpec& mod = m.rule.rule->moderation;
  const auto reading = guardrail_moderation::read(mod, res, inputs);
  if (reading.verdict == guardrail_moderation::Verdict::Flagged) {
    m.settled = true;  // a flag is recorded once; a block ends the answer
    handler_->moderationFlagged(m.rule);
  } else if (reading.verdict == guardrail_moderation::Verdict::None && mod.fail_closed) {
    m.settled = true;
    handler_->moderationUnchecked(m.rule, reading.why);
  } else {
    if (reading.verdict == guardrail_moderation::Verdict::None) handler_->moderationUnchecked(m.rule, reading.why);
    m.checked = m.sent;  // passed (or let through unchecked: on_error allow)
  }
  handler_->moderationAnswered();
}

}  // namespace tahua
