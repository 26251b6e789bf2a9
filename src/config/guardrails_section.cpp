// `guardrails:` and GuardrailPolicy resources: policies of content rules, compiled into
// a matcher when the config loads (a pattern the matcher refuses is a config error naming
// the rule).
#include <cstdlib>
#include <set>

#include "http/http_url.h"

#include "config/loader_detail.h"
#include "guardrails/rule_set.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kGuardrailsFields[] = {
    list("policies", "[]", "Policies of content rules (also GuardrailPolicy resources); every policy attached applies."),
};
const Table kGuardrails("guardrails",
                       "Content rules over requests and answers, streams included (docs/guardrails.md). Block wins over "
                       "redact, redact over flag.",
                       kGuardrailsFields);

constexpr Field kGuardPolicyFields[] = {
    nonEmpty("name", "", "Unique among policies; absent: `policy-<index>` (a GuardrailPolicy: its resource's name)."),
    section("match", "The requests the policy is attached to; absent: every request."),
    list("rules", "", "At most 1000 rules, names unique in the policy.").needed(),
};
const Table kGuardPolicy("guardrails.policies[]", "A guardrail policy: rules for the requests it is attached to.", kGuardPolicyFields);

constexpr Field kGuardMatchFields[] = {
    list("model", "[]", "A model name or a list, as asked or as routed (on /mcp: a tool as `server__tool`); empty: any."),
    list("route", "[]", "A route name or a list; empty: any."),
    list("tenant", "[]", "A tenant name or a list; empty: any."),
    list("key", "[]", "A key name or a list; empty: any."),
};
const Table kGuardMatch("guardrails.policies[].match", "Which requests the policy is attached to: every list given must hold.",
                   kGuardMatchFields);

constexpr Field kGuardRuleFields[] = {
    nonEmpty("name", "", "Unique in the policy; verdicts name it as `policy/rule`.").needed(),
    list("inspect", "[input, output]",
         "What the rule reads: input, system, tool_arguments, output, output_tool_calls. Injection and moderation "
         "rules: [input] by default (injection: the request only)."),
    choice("action", "block | redact | flag", "",
           "block: 400 content_blocked (an answer emptied, a stream ended); redact: the match masked; flag: only "
           "recorded. Moderation and quality: block or flag.")
        .needed(),
    string("mask", "\"[REDACTED]\"", "What a redacted match becomes (at most 256 bytes)."),
    integer("max_match_chars", 1, 65536, "256",
            "Bytes: the longest match kept whole, and how much a stream holds back for a regex."),
    list("patterns", "", "Regexes (Hyperscan syntax that RE2 also accepts); a detector, with or without literals."),
    list("literals", "", "Texts matched as they are; a detector, with or without patterns."),
    boolean("caseless", "false", "patterns and literals: ignore case."),
    any("pii", "",
        "A detector: `all`, or a list of email, phone, payment_card, iban, china_resident_id, api_key, "
        "aws_access_key (checked with their check digits)."),
    any("injection", "", "A detector of prompt injection in the request: `true`, or a mapping (below)."),
    section("moderation", "A detector: an endpoint in OpenAI's moderation shape."),
    section("quality", "A detector: the answer judged off-topic by the similarity of its embedding to the prompt's."),
};
const Table kGuardRule("guardrails.policies[].rules[]",
                  "A rule: exactly one detector (patterns / literals, pii, injection, moderation or quality) and an action.",
                  kGuardRuleFields);

constexpr Field kInjectionFields[] = {
    number("threshold", 100, "0.5", "The score that makes a hit (above 0).", "a score"),
    list("allow", "", "Up to 100 phrases (200 bytes each, folded) no signal may use or join across."),
    boolean("explain", "false", "A block's message names the score and the signals."),
};
const Table kInjection("guardrails.policies[].rules[].injection", "Prompt injection, tuned per policy.", kInjectionFields);

constexpr Field kModerationFields[] = {
    nonEmpty("url", "", "http(s)://host[:port]/v1/moderations.").needed(),
    string("model", "", "Sent as `model`; absent: not sent."),
    string("api_key", "", "Sent as a bearer token; prefer api_key_env."),
    nonEmpty("api_key_env", "", "The environment variable holding the key (read at start; unset: calls go without one)."),
    duration("timeout", 1, "2s", "No verdict within this is an error (on_error decides)."),
    choice("on_error", "allow | block", "allow",
           "No verdict (down, slow, a bad answer): allow lets the text pass, block refuses (503 guardrail_unavailable)."),
    list("categories", "", "Flag only for these categories' scores; absent: the endpoint's own `flagged`."),
    number("threshold", 1, "0.5", "With categories: a category score at or above this flags.", "a score"),
    integer("stream_interval", 50, 65536, "500", "A streamed answer's text is checked every this many characters (and at its end)."),
    choice("stream_mode", "pass | hold", "pass",
           "pass: text flows while it is checked; hold: text leaves only once a check passed it."),
};
const Table kModeration("guardrails.policies[].rules[].moderation",
                        "A moderation endpoint; for the request's text, and with `inspect: [output]` the answer's.",
                        kModerationFields);

constexpr Field kQualityFields[] = {
    nonEmpty("embedding_model", "", "One of the gateway's models, served by an openai, azure-openai or mock provider.").needed(),
    number("threshold", 1, "0.35", "A cosine similarity below this is off-topic.", "a cosine similarity"),
    number("sample", 1, "1", "The share of answers checked.", "a share of answers"),
    duration("timeout", 1, "2s", "The embedding call's, at most 60s; no embeddings in time: the answer passes, unchecked."),
};
const Table kQuality("guardrails.policies[].rules[].quality",
                     "Answer quality: a non-streamed answer waits for the verdict (block: the next fallback answers once, "
                     "else 502 response_quality_low); a stream is checked once it ended.",
                     kQualityFields);

struct TargetName {
  std::string_view name;
  std::uint8_t target;
};
constexpr TargetName kTargets[] = {{"input", guardrails::kInput},
                                   {"system", guardrails::kSystem},
                                   {"tool_arguments", guardrails::kToolArguments},
                                   {"output", guardrails::kOutput},
                                   {"output_tool_calls", guardrails::kOutputToolCalls}};

}  // namespace

GuardrailPolicyConfig Loader::guardrailPolicy(const YAML::Node& y, const std::string& p, const std::string& name, const Config& cfg) {
  if (!y.IsMap()) fail(y, p, "expected a mapping");
  Fields pf(*this, y, p, kGuardPolicy);
  GuardrailPolicyConfig pol;
  pol.name = name;
  if (auto m = pf["match"])
    matchLists(m, p + ".match", kGuardMatch, {{"model", &pol.models}, {"route", &pol.routes}, {"tenant", &pol.tenants}, {"key", &pol.keys}});
  const YAML::Node rs = pf["rules"];
  if (!rs || !rs.IsSequence() || rs.size() == 0) fail(rs ? rs : y, p + ".rules", "required: a list of rules");
  if (rs.size() > 1000) fail(rs, p + ".rules", "at most 1000 rules in a policy");
  std::vector<guardrails::RuleSpec> rules;
  std::set<std::string, std::less<>> names;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const YAML::Node r = rs[i];
    const std::string rp = p + ".rules[" + std::to_string(i) + "]";
    if (!r.IsMap()) fail(r, rp, "expected a mapping");
    Fields rf(*this, r, rp, kGuardRule);
    guardrails::RuleSpec spec;
    spec.name = nonEmpty(r["name"], rp + ".name");
    if (!names.insert(spec.name).second) fail(r["name"], rp + ".name", "duplicate rule \"" + spec.name + "\" in the policy");
    // The detector: exactly one kind.
    const int kinds = (r["patterns"] || r["literals"] ? 1 : 0) + (r["pii"] ? 1 : 0) + (r["injection"] ? 1 : 0) + (r["moderation"] ? 1 : 0) +
                      (r["quality"] ? 1 : 0);
    if (kinds != 1) fail(r, rp, "expected exactly one detector: patterns / literals, pii, injection, moderation, or quality");
    const auto strings = [&](const char* field, std::vector<std::string>& out) {
      const YAML::Node v = r[field];
      if (!v) return;
      const std::string fp = rp + "." + field;
      if (!v.IsSequence() || v.size() == 0) fail(v, fp, "expected a list of strings");
      for (std::size_t k = 0; k < v.size(); ++k) out.push_back(nonEmpty(v[k], fp + "[" + std::to_string(k) + "]"));
    };
    if (r["patterns"] || r["literals"]) {
      spec.detector = guardrails::RuleSpec::Detector::Patterns;
      strings("patterns", spec.patterns);
      strings("literals", spec.literals);
      rf.read("caseless", spec.caseless);
    } else if (r["pii"]) {
      const YAML::Node v = r["pii"];
      spec.detector = guardrails::RuleSpec::Detector::Pii;
      if (v.IsScalar() && v.Scalar() == "all") {
        // every kind: an empty list
      } else {
        if (!v.IsSequence() || v.size() == 0) fail(v, rp + ".pii", "expected `all` or a list of kinds");
        for (std::size_t k = 0; k < v.size(); ++k) {
          const std::string kp = rp + ".pii[" + std::to_string(k) + "]";
          guardrails::PiiKind kind;
          if (!guardrails::piiKindFromName(str(v[k], kp), kind)) {
            std::string all;
            for (auto kk : guardrails::allPiiKinds()) all += (all.empty() ? "" : ", ") + std::string(guardrails::piiKindName(kk));
            fail(v[k], kp, "unknown kind (" + all + ")");
          }
          spec.pii.push_back(kind);
        }
      }
      if (r["caseless"]) fail(r["caseless"], rp + ".caseless", "only for patterns and literals");
    } else if (r["moderation"]) {
      const YAML::Node m = r["moderation"];
      const std::string mp = rp + ".moderation";
      spec.detector = guardrails::RuleSpec::Detector::Moderation;
      spec.targets = guardrails::kInput;
      if (!m.IsMap())
        fail(m, mp, "expected a mapping: {url, model, api_key | api_key_env, timeout, on_error, categories, threshold, stream_interval, stream_mode}");
      Fields mf(*this, m, mp, kModeration);
      guardrails::ModerationSpec& mod = spec.moderation;
      mf.read("url", mod.url);  // required: "required" at the mapping's position
      std::string why;
      if (!parseHttpUrl(mod.url, &why, true)) fail(m["url"], mp + ".url", why + " (expected http(s)://host[:port]/v1/moderations)");
      mf.read("model", mod.model);
      if (m["api_key"] && m["api_key_env"]) fail(m["api_key"], mp + ".api_key", "set api_key or api_key_env, not both");
      mf.read("api_key", mod.api_key);
      if (std::string env; mf.read("api_key_env", env)) {
        const char* value = std::getenv(env.c_str());
        if (value && *value) mod.api_key = value;
        else warnings_.push_back("guardrail rule \"" + spec.name + "\": environment variable " + env + " is not set; the moderation calls go without a key");
      }
      if (Millis t{mod.timeout_ms}; mf.read("timeout", t)) mod.timeout_ms = t.count();
      if (auto v = mf["on_error"]) {
        const std::string e = str(v, mp + ".on_error");
        if (e == "allow") mod.fail_closed = false;
        else if (e == "block") mod.fail_closed = true;
        else fail(v, mp + ".on_error", "expected allow (fail open) or block (fail closed)");
      }
      if (auto v = mf["categories"]) {
        if (!v.IsSequence() || v.size() == 0) fail(v, mp + ".categories", "expected a list of category names");
        for (std::size_t k = 0; k < v.size(); ++k) mod.categories.push_back(nonEmpty(v[k], mp + ".categories[" + std::to_string(k) + "]"));
      }
      if (mf.read("threshold", mod.threshold) && mod.categories.empty())
        fail(mf["threshold"], mp + ".threshold", "a threshold applies to `categories`");
      mf.read("stream_interval", mod.stream_interval);
      if (auto v = mf["stream_mode"]) {
        const std::string mode = str(v, mp + ".stream_mode");
        if (mode == "hold") mod.stream_hold = true;
        else if (mode != "pass") fail(v, mp + ".stream_mode", "expected pass (text flows while it is checked) or hold (text leaves once checked)");
      }
      if (r["caseless"]) fail(r["caseless"], rp + ".caseless", "only for patterns and literals");
    } else if (r["quality"]) {
      const YAML::Node q = r["quality"];
      const std::string qp = rp + ".quality";
      spec.detector = guardrails::RuleSpec::Detector::Quality;
      spec.targets = 0;  // the filter embeds the prompt and the answer itself
      if (!q.IsMap()) fail(q, qp, "expected a mapping: {embedding_model, threshold, sample, timeout}");
      Fields qf(*this, q, qp, kQuality);
      guardrails::QualitySpec& qs = spec.quality;
      qs.embedding_model = nonEmpty(q["embedding_model"], qp + ".embedding_model");
      if (const std::string why = embeddingModelProblem(cfg, qs.embedding_model); !why.empty()) fail(q["embedding_model"], qp + ".embedding_model", why);
      qf.read("threshold", qs.threshold);
      qf.read("sample", qs.sample);
      if (Millis t{qs.timeout_ms}; qf.read("timeout", t)) qs.timeout_ms = t.count();
      if (qs.timeout_ms > 60000) fail(q["timeout"], qp + ".timeout", "at most 60s");
      for (const char* other : {"caseless", "inspect", "mask", "max_match_chars"})
        if (r[other]) fail(r[other], rp + "." + other, "not for a quality rule (it compares the prompt and the whole answer)");
    } else {
      const YAML::Node v = r["injection"];
      spec.detector = guardrails::RuleSpec::Detector::Injection;
      spec.targets = guardrails::kInput;
      if (v.IsMap()) {
        const std::string ip = rp + ".injection";
        Fields jf(*this, v, ip, kInjection);
        jf.read("threshold", spec.threshold);
        if (!(spec.threshold > 0)) fail(v["threshold"], ip + ".threshold", "must be above 0");
        if (auto a = jf["allow"]) {
          if (!a.IsSequence() || a.size() == 0) fail(a, ip + ".allow", "expected a list of phrases no signal may use");
          if (a.size() > 100) fail(a, ip + ".allow", "at most 100 phrases");
          for (std::size_t k = 0; k < a.size(); ++k) {
            const std::string kp = ip + ".allow[" + std::to_string(k) + "]";
            const std::string phrase = nonEmpty(a[k], kp);
            if (phrase.size() > 200) fail(a[k], kp, "at most 200 bytes");
            spec.allow.push_back(guardrails::foldedPhrase(phrase));
            if (spec.allow.back().empty()) fail(a[k], kp, "nothing left once folded (invisible characters only)");
          }
        }
        jf.read("explain", spec.explain);
      } else if (!v.IsScalar() || !boolean(v, rp + ".injection")) {
        fail(v, rp + ".injection", "expected true or {threshold: score, allow: [phrases], explain: bool}");
      }
      if (r["caseless"]) fail(r["caseless"], rp + ".caseless", "only for patterns and literals");
    }
    if (auto v = rf["inspect"]) {
      if (!v.IsSequence() || v.size() == 0) fail(v, rp + ".inspect", "expected a list (input, system, tool_arguments, output, output_tool_calls)");
      spec.targets = 0;
      for (std::size_t k = 0; k < v.size(); ++k) {
        const std::string kp = rp + ".inspect[" + std::to_string(k) + "]";
        const std::string t = str(v[k], kp);
        const auto it = std::find_if(std::begin(kTargets), std::end(kTargets), [&](const TargetName& x) { return x.name == t; });
        if (it == std::end(kTargets)) fail(v[k], kp, "expected input, system, tool_arguments, output or output_tool_calls");
        spec.targets |= it->target;
      }
    }
    if (spec.detector == guardrails::RuleSpec::Detector::Injection && (spec.targets & guardrails::kAnswerTargets))
      fail(r["inspect"], rp + ".inspect", "an injection rule looks at the request: input, system or tool_arguments");
    if (spec.detector == guardrails::RuleSpec::Detector::Moderation) {
      if (spec.targets & guardrails::kOutputToolCalls)
        fail(r["inspect"], rp + ".inspect", "a moderation rule reads text: input, system, tool_arguments or output");
      for (const char* f : {"stream_interval", "stream_mode"})
        if (r["moderation"][f] && !(spec.targets & guardrails::kOutput))
          fail(r["moderation"][f], rp + ".moderation." + f, "for a rule that inspects output (streamed answers)");
    }
    if (auto v = rf["action"]) {
      const std::string a = str(v, rp + ".action");
      if (a == "flag") spec.action = guardrails::Action::Flag;
      else if (a == "redact") spec.action = guardrails::Action::Redact;
      else if (a == "block") spec.action = guardrails::Action::Block;
      else fail(v, rp + ".action", "expected block, redact or flag");
    } else {
      fail(r, rp + ".action", "required: block, redact or flag");
    }
    if (spec.detector == guardrails::RuleSpec::Detector::Moderation && spec.action == guardrails::Action::Redact)
      fail(r["action"], rp + ".action", "a moderation verdict is about a whole text: block or flag");
    if (spec.detector == guardrails::RuleSpec::Detector::Quality && spec.action == guardrails::Action::Redact)
      fail(r["action"], rp + ".action", "a quality verdict is about a whole answer: block (non-streamed answers, retried once on a fallback) or flag");
    if (rf.read("mask", spec.mask) && spec.mask.size() > 256) fail(rf["mask"], rp + ".mask", "at most 256 bytes");
    rf.read("max_match_chars", spec.max_match_chars);
    rules.push_back(std::move(spec));
  }
  {
    YAML::Emitter out;
    out << y;
    pol.fingerprint = std::to_string(std::hash<std::string_view>{}(std::string_view(out.c_str(), out.size())));
  }
  std::string error;
  pol.rules = guardrails::RuleSet::compile(std::move(rules), error);
  if (!pol.rules) {
    // "rule \"name\" patterns[2]: why": point at that rule.
    const auto q1 = error.find('"'), q2 = error.find('"', q1 + 1);
    const std::string bad = q1 == std::string::npos || q2 == std::string::npos ? "" : error.substr(q1 + 1, q2 - q1 - 1);
    for (std::size_t i = 0; i < rs.size(); ++i)
      if (rs[i]["name"] && rs[i]["name"].Scalar() == bad) fail(rs[i], p + ".rules[" + std::to_string(i) + "]", error);
    fail(rs, p + ".rules", error);
  }
  return pol;
}

void Loader::loadGuardrails(const YAML::Node& n, Config& cfg) {
  Fields f(*this, n, "guardrails", kGuardrails);
  const YAML::Node ps = f["policies"];
  if (!ps) return;
  if (!ps.IsSequence()) fail(ps, "guardrails.policies", "expected a list of policies");
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const std::string p = "guardrails.policies[" + std::to_string(i) + "]";
    const std::string name = ps[i].IsMap() && ps[i]["name"] ? nonEmpty(ps[i]["name"], p + ".name") : "policy-" + std::to_string(i);
    for (const auto& other : cfg.guardrails.policies)
      if (other.name == name) fail(ps[i]["name"], p + ".name", "duplicate policy \"" + name + "\"");
    cfg.guardrails.policies.push_back(guardrailPolicy(ps[i], p, name, cfg));
  }
}

}  // namespace tahua::config_detail
