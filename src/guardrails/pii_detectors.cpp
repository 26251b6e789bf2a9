#include "guardrails/pii_detectors.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <memory>
#include <string>

#include "guardrails/rule_set.h"

namespace tahua::guardrails {

namespace {
constexpr std::array<PiiKind, 7> kAllKinds{PiiKind::Email,           PiiKind::Phone,  PiiKind::PaymentCard, PiiKind::Iban,
                                           PiiKind::ChinaResidentId, PiiKind::ApiKey, PiiKind::AwsAccessKey};

// Bounded repeats where Hyperscan allows: a shape's longest match is what a stream holds back.
constexpr PiiShape kShapes[] = {
    // Unbounded: Hyperscan refuses the start-of-match tracking of an email shape with
    // bounded repeats as "too large"; max_match_chars bounds what a stream holds back.
    {PiiKind::Email, R"(\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b)", false, nullptr, "A-Za-z0-9._%+@-"},
    {PiiKind::PaymentCard, R"(\b\d(?:[ -]?\d){12,18}\b)", false, luhnValid, "0-9 -", true},
    {PiiKind::Iban, R"(\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b)", false, ibanValid, "A-Z0-9 "},
    {PiiKind::ChinaResidentId, R"(\b\d{17}[\dXx]\b)", false, chinaResidentIdValid, "0-9Xx", true},
    {PiiKind::Phone, R"(\+\d{8,15}\b)", false, phoneValid, "+0-9", true},
    {PiiKind::Phone, R"((?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?|\b)\d{2,4}(?:[ .-]?\d{2,4}){2,4}\b)", false, phoneValid, "+0-9 ().-", true},
    {PiiKind::ApiKey, R"(\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,160})", false, nullptr, "A-Za-z0-9_-"},
    {PiiKind::AwsAccessKey, R"(\b(?:AKIA|ASIA)[A-Z0-9]{16}\b)", false, nullptr, "A-Z0-9"},
};
}  // namespace

std::span<const PiiKind> allPiiKinds() { return kAllKinds; }
std::span<const PiiShape> piiShapes() { return kShapes; }

std::string_view piiKindName(PiiKind kind) {
  switch (kind) {
    case PiiKind::Email: return "email";
    case PiiKind::Phone: return "phone";
    case PiiKind::PaymentCard: return "payment_card";
    case PiiKind::Iban: return "iban";
    case PiiKind::ChinaResidentId: return "china_resident_id";
    case PiiKind::ApiKey: return "api_key";
    case PiiKind::AwsAccessKey: return "aws_access_key";
  }
  return "";
}

bool piiKindFromName(std::string_view name, PiiKind& kind) {
  for (PiiKind k : kAllKinds)
    if (piiKindName(k) == name) {
      kind = k;
      return true;
    }
  return false;
}

// A phone number: 10 to 15 digits (E.164 allows up to 15), or 8 and more after a '+'
// country code, so dates (8 digits) and short codes are not phones; four dot-separated
// groups of at most three digits are an IPv4 address.
bool phoneValid(std::string_view s) {
  const auto digits = std::count_if(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (digits > 15 || (digits < 10 && !(!s.empty() && s.front() == '+' && digits >= 8))) return false;
  if (std::count(s.begin(), s.end(), '.') == 3 && std::all_of(s.begin(), s.end(), [](char c) { return c == '.' || std::isdigit(static_cast<unsigned char>(c)); })) {
    std::size_t run = 0;
    bool ip = true;
    for (char c : s) {
      run = c == '.' ? 0 : run + 1;
      if (run > 3) ip = false;
    }
    if (ip) return false;
  }
  return true;
}

namespace {
bool isDigit(char c) { return c >= '0' && c <= '9'; }
// Digits in the group that ends just before `end` / starts at `begin`.
std::size_t groupBefore(std::string_view t, std::size_t end) {
  std::size_t n = 0;
  while (end > n && isDigit(t[end - 1 - n])) ++n;
  return n;
}
std::size_t groupAfter(std::string_view t, std::size_t begin) {
  std::size_t n = 0;
  while (begin + n < t.size() && isDigit(t[begin + n])) ++n;
  return n;
}
}  // namespace

constexpr std::size_t kSpacedGroup = 3;  // a space joins groups of at least this many digits

bool runJoinedBefore(std::string_view t, std::size_t begin) {
  // What comes before a match was seen already (a stream keeps what a match can reach).
  if (begin < 2 || begin >= t.size() || !isDigit(t[begin])) return false;
  const char sep = t[begin - 1];
  if ((sep == '-' || sep == '.') && isDigit(t[begin - 2])) return true;
  return sep == ' ' && groupBefore(t, begin - 1) >= kSpacedGroup && groupAfter(t, begin) >= kSpacedGroup;
}

RunVerdict runEndsAt(std::string_view t, std::size_t end, bool complete) {
  // What comes after may not have come yet.
  if (end == 0 || end > t.size() || !isDigit(t[end - 1])) return RunVerdict::Whole;
  if (end == t.size()) return complete ? RunVerdict::Whole : RunVerdict::Unknown;
  const char sep = t[end];
  if (sep != '-' && sep != '.' && sep != ' ') return RunVerdict::Whole;
  if (end + 1 == t.size()) return complete ? RunVerdict::Whole : RunVerdict::Unknown;
  if (!isDigit(t[end + 1])) return RunVerdict::Whole;
  if (sep != ' ') return RunVerdict::Part;
  if (groupBefore(t, end) < kSpacedGroup) return RunVerdict::Whole;
  const std::size_t next = groupAfter(t, end + 1);
  if (next >= kSpacedGroup) return RunVerdict::Part;
  if (end + 1 + next == t.size() && !complete) return RunVerdict::Unknown;
  return RunVerdict::Whole;
}

bool luhnValid(std::string_view number) {
  int sum = 0, n = 0;
  for (auto it = number.rbegin(); it != number.rend(); ++it) {
    const char c = *it;
    if (c == ' ' || c == '-') continue;
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    int d = c - '0';
    if (n++ % 2 == 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return n >= 13 && n <= 19 && sum % 10 == 0;
}

bool ibanValid(std::string_view iban) {
  std::string s;
  for (char c : iban)
    if (c != ' ') s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (s.size() < 15 || s.size() > 34) return false;
  // The first four characters go to the end; letters count as 10..35; mod 97 must be 1.
  std::rotate(s.begin(), s.begin() + 4, s.end());
  int mod = 0;
  for (char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      mod = (mod * 10 + (c - '0')) % 97;
    } else if (c >= 'A' && c <= 'Z') {
      const int v = c - 'A' + 10;
      mod = (mod * 100 + v) % 97;
    } else {
      return false;
    }
  }
  return mod == 1;
}

bool chinaResidentIdValid(std::string_view id) {
  // GB 11643-1999: weights 2^(17-i) mod 11 over the first 17 digits; the check character
  // is "10X98765432"[sum % 11].
  static constexpr std::array<int, 17> kWeights{7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2};
  static constexpr std::string_view kCheck = "10X98765432";
  if (id.size() != 18) return false;
  int sum = 0;
  for (std::size_t i = 0; i < 17; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(id[i]))) return false;
    sum += (id[i] - '0') * kWeights[i];
  }
  // A plausible birth date (YYYYMMDD at 6..13) keeps random 18-digit numbers out.
  const int year = std::stoi(std::string(id.substr(6, 4))), month = std::stoi(std::string(id.substr(10, 2))),
            day = std::stoi(std::string(id.substr(12, 2)));
  if (year < 1900 || year > 2100 || month < 1 || month > 12 || day < 1 || day > 31) return false;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(id[17])));
  return kCheck[static_cast<std::size_t>(sum % 11)] == last;
}

std::vector<PiiMatch> findPii(std::string_view text, std::span<const PiiKind> kinds) {
  // One rule per kind, so each match names its kind.
  static const std::shared_ptr<const RuleSet> all = [] {
    std::vector<RuleSpec> rules;
    for (PiiKind k : kAllKinds) {
      RuleSpec r;
      r.name = std::string(piiKindName(k));
      r.detector = RuleSpec::Detector::Pii;
      r.pii = {k};
      rules.push_back(std::move(r));
    }
    std::string error;
    auto set = RuleSet::compile(std::move(rules), error);
    return set;
  }();
  std::vector<PiiMatch> out;
  if (!all) return out;
  RuleScratch scratch;
  auto hits = all->scanText(text, scratch);
  mergeHits(hits);
  for (const RuleHit& h : hits) {
    const PiiKind k = kAllKinds[h.rule];
    if (!kinds.empty() && std::find(kinds.begin(), kinds.end(), k) == kinds.end()) continue;
    out.push_back(PiiMatch{k, h.begin, h.end});
  }
  std::sort(out.begin(), out.end(), [](const PiiMatch& a, const PiiMatch& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  return out;
}

}  // namespace tahua::guardrails
