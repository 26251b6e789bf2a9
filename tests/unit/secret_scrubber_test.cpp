#include "providers/secret_scrubber.h"

#include <gtest/gtest.h>

#include <string>

namespace tahua {
namespace secret_scrubber_test {  // named, not anonymous: eight test files compile as one unit

ProviderConfig withKey(std::string key) {
  ProviderConfig p;
  p.api_key = std::move(key);
  return p;
}

// Feeds `pieces` as a stream and returns what the client would get.
std::string relay(SecretScrubber& s, std::initializer_list<std::string_view> pieces) {
  std::string out;
  for (auto piece : pieces) out += s.scrubPiece(piece);
  s.dropHeld();
  return out;
}

TEST(SecretScrubber, PassesCleanPiecesThroughWithoutCopy) {
  ProviderConfig p = withKey("sk-secret-123");
  SecretScrubber s(p);
  const std::string_view in = "data: {\"content\":\"hello\"}\n\n";
  const std::string_view out = s.scrubPiece(in);
  EXPECT_EQ(out.data(), in.data());  // a view of the input itself
  EXPECT_EQ(out.size(), in.size());
  EXPECT_FALSE(s.holding());
}

TEST(SecretScrubber, RedactsAWholeSecretInAPiece) {
  ProviderConfig p = withKey("sk-secret-123");
  SecretScrubber s(p);
  EXPECT_EQ(relay(s, {"a sk-secret-123 b sk-secret-123\n\n"}), "a [redacted] b [redacted]\n\n");
}

TEST(SecretScrubber, CatchesASecretSplitAtEveryPoint) {
  const std::string key = "sk-secret-123";
  ProviderConfig p = withKey(key);
  const std::string text = "x " + key + " y\n\n";
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    SecretScrubber s(p);
    EXPECT_EQ(relay(s, {std::string_view(text).substr(0, cut), std::string_view(text).substr(cut)}), "x [redacted] y\n\n")
        << cut;
  }
}

TEST(SecretScrubber, HoldsBackOnlyAPossibleStart) {
  ProviderConfig p = withKey("sk-secret-123");
  SecretScrubber s(p);
  EXPECT_EQ(s.scrubPiece("abc sk-sec"), "abc ");  // the tail could begin the key
  EXPECT_TRUE(s.holding());
  EXPECT_EQ(s.scrubPiece("ond"), "sk-second");  // it did not: released with the next piece
  EXPECT_FALSE(s.holding());
  EXPECT_EQ(s.scrubPiece("ends with s"), "ends with ");  // one byte: "s" starts the key
  EXPECT_EQ(s.scrubPiece("\n\n"), "s\n\n");
  EXPECT_EQ(s.scrubPiece("no start here"), "no start here");
}

TEST(SecretScrubber, DropsAHeldStartWhenTheStreamEnds) {
  ProviderConfig p = withKey("sk-secret-123");
  SecretScrubber s(p);
  EXPECT_EQ(s.scrubPiece("partial sk-secret-12"), "partial ");
  s.dropHeld();
  EXPECT_FALSE(s.holding());
}

TEST(SecretScrubber, AllConfiguredSecretsAndNoShortOnes) {
  ProviderConfig p;
  p.api_key = "abc";  // too short to scrub: it would match everywhere
  p.aws.secret_access_key = "AWS/SECRET+KEY";
  p.aws.session_token = "TOKEN-xyz-987";
  SecretScrubber s(p);
  std::string text = "abc AWS/SECRET+KEY TOKEN-xyz-987";
  EXPECT_TRUE(s.scrubWhole(text));
  EXPECT_EQ(text, "abc [redacted] [redacted]");
  std::string header;
  EXPECT_FALSE(s.scrubValue("clean", header));
  EXPECT_TRUE(s.scrubValue("Bearer TOKEN-xyz-987", header));
  EXPECT_EQ(header, "Bearer [redacted]");
}

TEST(SecretScrubber, InactiveWithoutSecrets) {
  ProviderConfig p;
  SecretScrubber s(p);
  EXPECT_FALSE(s.active());
  EXPECT_EQ(s.scrubPiece("sk-anything"), "sk-anything");
}

}  // namespace secret_scrubber_test
}  // namespace tahua
