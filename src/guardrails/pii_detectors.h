// Personal data and secrets in a text, found by shape (RE2 patterns, compiled once) and
// kept only when they validate: a payment card passes the Luhn check, an IBAN its
// mod-97 check digits, a mainland China resident ID its ISO 7064 check character. The
// guardrail filters (issue 22) build on these; here they are a library of their own,
// free of requests and config, unit-tested.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace tahua::guardrails {

enum class PiiKind { Email, Phone, PaymentCard, Iban, ChinaResidentId, ApiKey, AwsAccessKey };
std::string_view piiKindName(PiiKind kind);  // "email", "phone", "payment_card", ...

struct PiiMatch {
  PiiKind kind;
  std::size_t begin = 0;  // byte offsets into the text
  std::size_t end = 0;
};

// Every validated match of `kinds` (all kinds when empty), in text order; overlapping
// matches of different kinds are all reported.
std::vector<PiiMatch> findPii(std::string_view text, std::span<const PiiKind> kinds = {});

// The checks, on the candidate's characters (separators such as spaces and dashes are
// skipped where the format allows them).
bool luhnValid(std::string_view number);
bool ibanValid(std::string_view iban);
bool chinaResidentIdValid(std::string_view id);

}  // namespace tahua::guardrails
