// Personal data and secrets found by shape and kept only when they validate: a payment
// card passes the Luhn check, an IBAN its mod-97 check digits, a mainland China resident
// ID its ISO 7064 check character and a plausible birth date, a phone number the E.164
// length rules (not a date, not an IP address). The shapes are Hyperscan patterns, compiled
// with a guardrail policy's own patterns into one database (rule_set.h); the checks run
// only on what a shape matched.
//
// Phone numbers are checked by these rules rather than libphonenumber: Debian 12's
// libphonenumber-dev depends on Boost 1.74's headers, which conflict with the Boost 1.81
// the gateway builds with.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace tahua::guardrails {

enum class PiiKind { Email, Phone, PaymentCard, Iban, ChinaResidentId, ApiKey, AwsAccessKey };
std::string_view piiKindName(PiiKind kind);  // "email", "phone", "payment_card", ...
bool piiKindFromName(std::string_view name, PiiKind& kind);
std::span<const PiiKind> allPiiKinds();

// A shape of a kind (a kind may have several), in Hyperscan's syntax, and the check a
// match must pass (null: the shape is enough).
struct PiiShape {
  PiiKind kind;
  const char* pattern;
  bool caseless;
  bool (*valid)(std::string_view);
  // Every character a match can contain ("a-z" ranges): a stream holds back only the
  // trailing run of these, since a match still growing lies within it.
  const char* chars;
  // A number: a match is judged only when it is the whole run of digits it lies in
  // (runJoinedBefore, runEndsAt), so a failed candidate never leaves a shorter one inside the same run.
  bool whole_run = false;
};
std::span<const PiiShape> piiShapes();

struct PiiMatch {
  PiiKind kind;
  std::size_t begin = 0;  // byte offsets into the text
  std::size_t end = 0;
};

// Every validated match of `kinds` (all kinds when empty), in text order; overlapping
// matches of different kinds are all reported. For tests and tools: requests are checked
// through a policy's compiled RuleSet.
std::vector<PiiMatch> findPii(std::string_view text, std::span<const PiiKind> kinds = {});

// Whether a match [begin, end) of `text` is the whole run of digits it lies in. A run
// goes on over one '-' or '.' between digits, and over one space between groups of three
// digits or more (cards and phone numbers are written so; "12/25" or "on 2024-01-05 555"
// are not one run with what stands before them by a space). runJoinedBefore: the run
// goes on before `begin`. runEndsAt: whether it ends at `end` (Part: it goes on;
// Unknown: `complete` is false and the text still to come may continue it).
enum class RunVerdict { Whole, Part, Unknown };
bool runJoinedBefore(std::string_view text, std::size_t begin);
RunVerdict runEndsAt(std::string_view text, std::size_t end, bool complete);

// The checks, on the candidate's characters (separators such as spaces and dashes are
// skipped where the format allows them).
bool luhnValid(std::string_view number);
bool ibanValid(std::string_view iban);
bool chinaResidentIdValid(std::string_view id);
bool phoneValid(std::string_view phone);

}  // namespace tahua::guardrails
