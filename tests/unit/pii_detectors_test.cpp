// The PII detectors: each kind found in a sentence, and a look-alike that fails its check
// (Luhn, IBAN mod 97, the resident ID's check character, a date for a phone) not found.
#include <gtest/gtest.h>

#include <string>

#include "guardrails/pii_detectors.h"

namespace tahua::guardrails {
namespace pii_detectors_test {  // named, not anonymous: eight test files compile as one unit

std::vector<std::string> found(std::string_view text, PiiKind kind) {
  std::vector<std::string> out;
  const PiiKind kinds[] = {kind};
  for (const auto& m : findPii(text, kinds)) out.emplace_back(text.substr(m.begin, m.end - m.begin));
  return out;
}

TEST(PiiDetectors, ChecksDigitsNotJustShapes) {
  EXPECT_TRUE(luhnValid("4111 1111 1111 1111"));
  EXPECT_FALSE(luhnValid("4111 1111 1111 1112"));
  EXPECT_TRUE(ibanValid("GB82 WEST 1234 5698 7654 32"));
  EXPECT_TRUE(ibanValid("DE89370400440532013000"));
  EXPECT_FALSE(ibanValid("GB82 WEST 1234 5698 7654 33"));
  EXPECT_TRUE(chinaResidentIdValid("11010519491231002X"));
  EXPECT_FALSE(chinaResidentIdValid("110105194912310021"));
  EXPECT_FALSE(chinaResidentIdValid("110105194913310028")) << "month 13";
}

TEST(PiiDetectors, FindsEachKindInTextAndSkipsLookAlikes) {
  EXPECT_EQ(found("Card 4111-1111-1111-1111 expires soon; not 4111 1111 1111 1112.", PiiKind::PaymentCard),
            std::vector<std::string>{"4111-1111-1111-1111"});
  EXPECT_EQ(found("Pay to GB82 WEST 1234 5698 7654 32 please", PiiKind::Iban), std::vector<std::string>{"GB82 WEST 1234 5698 7654 32"});
  EXPECT_TRUE(found("ref GB82 WEST 1234 5698 7654 33", PiiKind::Iban).empty());
  EXPECT_EQ(found("身份证 11010519491231002X 号", PiiKind::ChinaResidentId), std::vector<std::string>{"11010519491231002X"});
  EXPECT_EQ(found("mail alice.smith+tag@example.co.uk now", PiiKind::Email), std::vector<std::string>{"alice.smith+tag@example.co.uk"});
  EXPECT_EQ(found("call +1 415 555 2671 today", PiiKind::Phone), std::vector<std::string>{"+1 415 555 2671"});
  EXPECT_TRUE(found("on 2024-01-15 at noon", PiiKind::Phone).empty()) << "a date is not a phone";
  EXPECT_EQ(found("key sk-proj-abcdefghijklmnopqrstuv1234 leaked", PiiKind::ApiKey),
            std::vector<std::string>{"sk-proj-abcdefghijklmnopqrstuv1234"});
  EXPECT_EQ(found("id AKIAIOSFODNN7EXAMPLE in logs", PiiKind::AwsAccessKey), std::vector<std::string>{"AKIAIOSFODNN7EXAMPLE"});
  EXPECT_TRUE(findPii("Nothing personal here, just 42 apples.").empty());
}

// A run of digits and separators is judged whole: a candidate that fails its check never
// falls back to a shorter match inside the same run (which masked 12 digits of a 16-digit
// number and left its tail readable).
TEST(PiiDetectors, ARunOfDigitsIsJudgedWholeNeverInPart) {
  for (const char* text : {"Value: 1234-5678-9012-3456 end.", "card 4111-1111-1111-1112 x", "order 2024-0001-7788-1234",
                           "n 4111 1111 1111 1112 y"}) {
    EXPECT_TRUE(findPii(text).empty()) << text << ": " << (findPii(text).empty() ? "" : std::string(text).substr(findPii(text)[0].begin));
  }
  // What the runs' own checks pass is still found, whole.
  EXPECT_EQ(found("Value: 4111-1111-1111-1111 end.", PiiKind::PaymentCard), std::vector<std::string>{"4111-1111-1111-1111"});
  EXPECT_EQ(found("call 415-555-2671 now", PiiKind::Phone), std::vector<std::string>{"415-555-2671"});
  EXPECT_EQ(found("call (415) 555-2671 now", PiiKind::Phone), std::vector<std::string>{"(415) 555-2671"});
  // A space joins groups of three digits or more only: an expiry or a date beside a
  // number by a space is not part of its run.
  EXPECT_EQ(found("card 4111 1111 1111 1111 12/25", PiiKind::PaymentCard), std::vector<std::string>{"4111 1111 1111 1111"});
  EXPECT_EQ(found("on 2024-01-05 415-555-2671", PiiKind::Phone), std::vector<std::string>{"415-555-2671"});
  EXPECT_EQ(runEndsAt("1234-5678-9012-3456", 14, true), RunVerdict::Part);
  EXPECT_TRUE(runJoinedBefore("1234-5678-9012-3456", 5));
  EXPECT_TRUE(runJoinedBefore("4111 1111 1111", 5));
  EXPECT_FALSE(runJoinedBefore("12 1111 1111", 3)) << "two digits and a space: another number";
  EXPECT_EQ(runEndsAt("1234-5678-9012", 14, false), RunVerdict::Unknown) << "the next piece may continue it";
  EXPECT_EQ(runEndsAt("1234-5678-9012-", 14, false), RunVerdict::Unknown);
  EXPECT_EQ(runEndsAt("1234 5678 9012 34", 14, false), RunVerdict::Unknown) << "a third digit would join the group";
  EXPECT_EQ(runEndsAt("1234 5678 9012 34 ", 14, false), RunVerdict::Whole);
  EXPECT_EQ(runEndsAt("1234-5678-9012 end", 14, false), RunVerdict::Whole);
}

TEST(PiiDetectors, ReportsEveryKindInTextOrder) {
  const std::string text = "alice@example.com paid with 4111111111111111";
  const auto all = findPii(text);
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all.front().kind, PiiKind::Email);
  EXPECT_EQ(piiKindName(all.front().kind), "email");
  bool card = false;
  for (const auto& m : all) card = card || m.kind == PiiKind::PaymentCard;
  EXPECT_TRUE(card);
}

}  // namespace pii_detectors_test
}  // namespace tahua::guardrails
