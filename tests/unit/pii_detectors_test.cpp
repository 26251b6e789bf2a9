// The PII detectors: each kind found in a sentence, and a look-alike that fails its check
// (Luhn, IBAN mod 97, the resident ID's check character, a date for a phone) not found.
#include <gtest/gtest.h>

#include <string>

#include "guardrails/pii_detectors.h"

namespace tahua::guardrails {
namespace {

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

}  // namespace
}  // namespace tahua::guardrails
