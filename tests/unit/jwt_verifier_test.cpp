// The JWT verifier (identity/jwt_verifier.h): each algorithm with keys made here by
// OpenSSL and published as JWKs, the forged algorithms (none; HS256 keyed with the RSA
// public key), the claim checks with their clock skew, unknown keys, and malformed
// tokens: each a precise Failure, none a crash.
#include <gtest/gtest.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include <boost/json.hpp>
#include <ctime>
#include <string>

#include "core/base64.h"
#include "identity/issuer_keys.h"
#include "identity/jwt_verifier.h"
#include "identity/verified_tokens.h"
#include "jwt_test_keys.h"

namespace tahua::jwt {
namespace jwt_verifier_test {  // named, not anonymous: eight test files compile as one unit
namespace bj = boost::json;

const std::int64_t kNow = 1'900'000'000;

bj::object claims(std::int64_t exp = kNow + 600) {
  return {{"iss", "https://idp.example"}, {"aud", "tahua"}, {"sub", "alice@example.com"}, {"exp", exp}, {"iat", kNow}};
}

const std::string kAudiences[] = {"tahua", "other"};
Policy policy(std::int64_t now = kNow, std::int64_t skew = 60) { return Policy{"https://idp.example", kAudiences, skew, now}; }

std::shared_ptr<const KeySet> setOf(std::initializer_list<const Signer*> signers) {
  bj::array keys;
  for (const Signer* s : signers) keys.push_back(s->jwk());
  std::string error;
  auto set = KeySet::parse(bj::serialize(bj::object{{"keys", keys}}), nullptr, error);
  EXPECT_TRUE(set) << error;
  return set;
}

std::optional<Failure> check(const std::string& compact, const KeySet& keys, const Policy& p = policy()) {
  Token t;
  if (auto f = parse(compact, t)) return f;
  return verify(t, keys, p);
}

class JwtVerifier : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rsa = new Signer(Alg::RS256, "rsa-1");
    ec = new Signer(Alg::ES256, "ec-1");
    ed = new Signer(Alg::EdDSA, "ed-1");
  }
  static void TearDownTestSuite() {
    delete rsa;
    delete ec;
    delete ed;
  }
  static Signer *rsa, *ec, *ed;
};
Signer* JwtVerifier::rsa = nullptr;
Signer* JwtVerifier::ec = nullptr;
Signer* JwtVerifier::ed = nullptr;

TEST_F(JwtVerifier, AcceptsEachAlgorithmWithItsKey) {
  auto keys = setOf({rsa, ec, ed});
  ASSERT_EQ(keys->size(), 3u);
  for (const Signer* s : {rsa, ec, ed}) {
    Token t;
    const std::string compact = s->token(claims());
    ASSERT_FALSE(parse(compact, t)) << algName(s->alg);
    const Key* used = nullptr;
    EXPECT_EQ(verify(t, *keys, policy(), &used), std::nullopt) << algName(s->alg);
    ASSERT_NE(used, nullptr);
    EXPECT_EQ(used->kid(), s->kid);
    EXPECT_EQ(t.issuer, "https://idp.example");
    EXPECT_EQ(expiry(t), kNow + 600);
  }
}

TEST_F(JwtVerifier, RefusesATamperedPayloadOrSignature) {
  auto keys = setOf({rsa, ec, ed});
  for (const Signer* s : {rsa, ec, ed}) {
    std::string compact = s->token(claims());
    // Another payload under the same signature.
    const auto d1 = compact.find('.'), d2 = compact.rfind('.');
    bj::object other = claims();
    other["sub"] = "mallory@example.com";
    const std::string forged = compact.substr(0, d1 + 1) + b64(bj::serialize(other)) + compact.substr(d2);
    EXPECT_EQ(check(forged, *keys), Failure::BadSignature) << algName(s->alg);
    // A flipped signature bit.
    std::string sig = *base64UrlDecode(compact.substr(d2 + 1));
    sig[5] ^= 1;
    EXPECT_EQ(check(compact.substr(0, d2 + 1) + b64(sig), *keys), Failure::BadSignature) << algName(s->alg);
  }
}

TEST_F(JwtVerifier, RefusesAlgNoneAndHmacSignedWithThePublicKey) {
  auto keys = setOf({rsa});
  const std::string input = b64(R"({"alg":"none","typ":"JWT","kid":"rsa-1"})") + "." + b64(bj::serialize(claims()));
  Token t;
  EXPECT_EQ(parse(input + ".", t), Failure::UnsupportedAlg);
  EXPECT_EQ(t.issuer, "https://idp.example");  // still told whose it claims to be
  // The classic confusion: HS256 with the RSA public key (PEM) as the HMAC secret.
  const std::string pem = rsa->publicPem();
  const std::string hs_input = b64(R"({"alg":"HS256","typ":"JWT","kid":"rsa-1"})") + "." + b64(bj::serialize(claims()));
  unsigned char mac[32];
  unsigned int n = 0;
  HMAC(EVP_sha256(), pem.data(), static_cast<int>(pem.size()), reinterpret_cast<const unsigned char*>(hs_input.data()),
       hs_input.size(), mac, &n);
  EXPECT_EQ(check(hs_input + "." + b64(std::string_view(reinterpret_cast<char*>(mac), n)), *keys), Failure::UnsupportedAlg);
  // An RSA key is never used for another alg: an ES256 header naming it finds no key.
  EXPECT_EQ(check(rsa->token(claims(), "ES256"), *keys), Failure::UnknownKey);
  // An HMAC secret in the JWKS ("oct") is not a key at all.
  std::string error;
  auto oct = KeySet::parse(R"({"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]})", nullptr, error);
  ASSERT_TRUE(oct);
  EXPECT_EQ(oct->size(), 0u);
}

TEST_F(JwtVerifier, ChecksIssuerAndAudience) {
  auto keys = setOf({ec});
  bj::object c = claims();
  c["iss"] = "https://evil.example";
  EXPECT_EQ(check(ec->token(c), *keys), Failure::WrongIssuer);
  c = claims();
  c["aud"] = "someone-else";
  EXPECT_EQ(check(ec->token(c), *keys), Failure::WrongAudience);
  c["aud"] = bj::array{"x", "other"};  // a list holding one accepted
  EXPECT_EQ(check(ec->token(c), *keys), std::nullopt);
  c.erase("aud");
  EXPECT_EQ(check(ec->token(c), *keys), Failure::WrongAudience);
}

TEST_F(JwtVerifier, ExpiryAndNotBeforeWithClockSkew) {
  auto keys = setOf({ed});
  EXPECT_EQ(check(ed->token(claims(kNow - 10)), *keys, policy(kNow, 0)), Failure::Expired);
  EXPECT_EQ(check(ed->token(claims(kNow - 10)), *keys, policy(kNow, 60)), std::nullopt);  // within the skew
  EXPECT_EQ(check(ed->token(claims(kNow - 61)), *keys, policy(kNow, 60)), Failure::Expired);
  bj::object c = claims();
  c["nbf"] = kNow + 30;
  EXPECT_EQ(check(ed->token(c), *keys, policy(kNow, 0)), Failure::NotYetValid);
  EXPECT_EQ(check(ed->token(c), *keys, policy(kNow, 60)), std::nullopt);
  c["nbf"] = kNow + 120;
  EXPECT_EQ(check(ed->token(c), *keys, policy(kNow, 60)), Failure::NotYetValid);
  c = claims();
  c.erase("exp");
  EXPECT_EQ(check(ed->token(c), *keys), Failure::MissingClaim);
  c["exp"] = "tomorrow";
  EXPECT_EQ(check(ed->token(c), *keys), Failure::Malformed);
}

TEST_F(JwtVerifier, UnknownKidAndKeylessTokens) {
  auto keys = setOf({rsa, ec});
  Signer other(Alg::RS256, "rsa-2");
  EXPECT_EQ(check(other.token(claims()), *keys), Failure::UnknownKey);
  // Same kid, another key: the signature fails.
  Signer impostor(Alg::RS256, "rsa-1");
  EXPECT_EQ(check(impostor.token(claims()), *keys), Failure::BadSignature);
  // No kid: the only key of the alg.
  const std::string input = b64(R"({"alg":"ES256"})") + "." + b64(bj::serialize(claims()));
  EXPECT_EQ(check(input + "." + b64(ec->sign(input)), *keys), std::nullopt);
}

TEST_F(JwtVerifier, MalformedTokensArePreciseErrors) {
  auto keys = setOf({rsa});
  Token t;
  EXPECT_EQ(parse("", t), Failure::Malformed);
  EXPECT_EQ(parse("abc", t), Failure::Malformed);
  EXPECT_EQ(parse("a.b", t), Failure::Malformed);
  EXPECT_EQ(parse("a.b.c.d", t), Failure::Malformed);
  EXPECT_EQ(parse("..", t), Failure::Malformed);
  const std::string good = rsa->token(claims());
  const auto d1 = good.find('.');
  EXPECT_EQ(parse("e+J" + good.substr(3), t), Failure::Malformed);  // not the url alphabet
  EXPECT_EQ(parse(good.substr(0, d1) + ".!!!." + "AA", t), Failure::Malformed);
  EXPECT_EQ(parse(b64("not json") + "." + b64("{}") + ".AA", t), Failure::Malformed);
  EXPECT_EQ(parse(b64("[1,2]") + "." + b64("{}") + ".AA", t), Failure::Malformed);
  EXPECT_EQ(parse(b64(R"({"alg":"RS256"})") + "." + b64("[]") + ".AA", t), Failure::Malformed);
  EXPECT_EQ(parse(b64(R"({"typ":"JWT"})") + "." + b64("{}") + ".AA", t), Failure::Malformed);  // no alg
  EXPECT_EQ(parse(b64(R"({"alg":"RS256","kid":7})") + "." + b64("{}") + ".AA", t), Failure::Malformed);
  // A huge header, and a huge token.
  const std::string huge_header = b64(R"({"alg":"RS256","x":")" + std::string(2000, 'a') + "\"}");
  EXPECT_EQ(parse(huge_header + "." + b64("{}") + ".AA", t), Failure::TooLarge);
  EXPECT_EQ(parse(good + std::string(kMaxTokenBytes, 'A'), t), Failure::TooLarge);
  // A truncated signature: it parses, and does not verify.
  EXPECT_EQ(check(good.substr(0, good.size() - 10), *keys), Failure::BadSignature);
  // An ES256 signature of the wrong length.
  auto eckeys = setOf({ec});
  const std::string es = ec->token(claims());
  EXPECT_EQ(check(es.substr(0, es.rfind('.') + 1) + b64(std::string(63, 'x')), *eckeys), Failure::BadSignature);
  EXPECT_FALSE(looksLikeJwt("tk-team-a-0123456789"));
  EXPECT_TRUE(looksLikeJwt(good));
}

TEST_F(JwtVerifier, JwksParsingSkipsWhatIsNotASigningKeyAndReusesKnownKeys) {
  std::string error;
  EXPECT_FALSE(KeySet::parse("{}", nullptr, error));
  EXPECT_FALSE(KeySet::parse("not json", nullptr, error));
  bj::object enc = rsa->jwk();
  enc["use"] = "enc";
  bj::object weak{{"kty", "RSA"}, {"kid", "weak"}, {"n", b64(std::string(128, '\x7f'))}, {"e", "AQAB"}};
  bj::object off_curve = ec->jwk();
  off_curve["kid"] = "bad-point";
  off_curve["y"] = b64(std::string(32, '\x01'));
  bj::object rs_as_es = rsa->jwk();
  rs_as_es["alg"] = "ES256";
  auto set = KeySet::parse(bj::serialize(bj::object{{"keys", bj::array{enc, weak, off_curve, rs_as_es, ed->jwk()}}}), nullptr, error);
  ASSERT_TRUE(set) << error;
  ASSERT_EQ(set->size(), 1u);
  EXPECT_EQ(set->keys()[0]->kid(), "ed-1");
  // A refresh listing the same key keeps the same object.
  auto again = KeySet::parse(bj::serialize(bj::object{{"keys", bj::array{ed->jwk(), rsa->jwk()}}}), set.get(), error);
  ASSERT_EQ(again->size(), 2u);
  EXPECT_TRUE(again->contains(set->keys()[0].get()));
}

TEST_F(JwtVerifier, IssuerKeysKeepTheSetWhenAFetchFailsAndMoveTheGenerationOnlyOnChange) {
  IssuerKeys keys;
  EXPECT_TRUE(keys.beginFetch(1000, 30'000));
  EXPECT_FALSE(keys.beginFetch(1001, 0));  // one in flight
  int ran = 0;
  EXPECT_TRUE(keys.whenFetched([&] { ++ran; }));
  const std::string one = bj::serialize(bj::object{{"keys", bj::array{rsa->jwk()}}});
  EXPECT_EQ(keys.endFetch(&one, {}), "");
  EXPECT_EQ(ran, 1);
  const auto g1 = keys.generation();
  EXPECT_FALSE(keys.beginFetch(2000, 30'000));  // too soon
  EXPECT_TRUE(keys.beginFetch(40'000, 30'000));
  EXPECT_NE(keys.endFetch(nullptr, "timeout"), "");
  EXPECT_EQ(keys.keys()->size(), 1u);  // an outage keeps the keys
  EXPECT_EQ(keys.generation(), g1);
  EXPECT_TRUE(keys.beginFetch(80'000, 30'000));
  EXPECT_EQ(keys.endFetch(&one, {}), "");
  EXPECT_EQ(keys.generation(), g1);  // the same keys: tokens verified stay
  EXPECT_TRUE(keys.beginFetch(120'000, 30'000));
  const std::string two = bj::serialize(bj::object{{"keys", bj::array{ec->jwk()}}});
  EXPECT_EQ(keys.endFetch(&two, {}), "");
  EXPECT_NE(keys.generation(), g1);
  EXPECT_FALSE(keys.whenFetched([] {}));  // none in flight
}

TEST(VerifiedTokens, DropsTheLeastRecentlyUsedPastItsCapacity) {
  VerifiedTokens cache(2);
  Sha256 a{}, b{}, c{};
  a[0] = 1, b[0] = 2, c[0] = 3;
  VerifiedToken good;
  good.valid_until_s = 1000;
  cache.put(a, good);
  cache.put(b, good);
  ASSERT_TRUE(cache.find(a, 10));  // a is now the most recent
  cache.put(c, good);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.find(a, 10));
  EXPECT_FALSE(cache.find(b, 10));
  EXPECT_TRUE(cache.find(c, 10));
}

TEST(VerifiedTokens, NoEntryOutlivesItsToken) {
  VerifiedTokens cache(8);
  Sha256 a{};
  VerifiedToken entry;
  entry.valid_until_s = 1000;  // exp plus the skew
  cache.put(a, entry);
  EXPECT_TRUE(cache.find(a, 999));
  EXPECT_FALSE(cache.find(a, 1000));
  EXPECT_EQ(cache.size(), 0u);  // dropped, not kept
}

TEST(Base64Url, RoundTripsAndRefusesOtherAlphabets) {
  for (std::string s : {"", "f", "fo", "foo", "foob", "fooba", "foobar", "\xfb\xff\xfe"}) EXPECT_EQ(base64UrlDecode(base64UrlEncode(s)), s);
  EXPECT_EQ(base64UrlEncode("\xfb\xff"), "-_8");
  EXPECT_FALSE(base64UrlDecode("+/8"));
  EXPECT_FALSE(base64UrlDecode("Zg=="));  // no padding in JWS
  EXPECT_FALSE(base64UrlDecode("Z"));     // no byte string is that
  EXPECT_FALSE(base64UrlDecode("Zh"));    // stray low bits
}

}  // namespace jwt_verifier_test
}  // namespace tahua::jwt
