// The cloud token room (src/cloud_auth/): the RS256 assertion a Google service account
// signs, checked by the gateway's own JWT verifier with the public half of a key OpenSSL
// made here; credentials files of each type read (and the unsupported ones named,
// never quoting a secret); and the token cache's refresher with a scripted source: the
// first token wakes its waiters, a refresh comes before the expiry, a failed one keeps
// the token it had.
#include <gtest/gtest.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <boost/json.hpp>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "cloud_auth/google_credentials.h"
#include "cloud_auth/jwt_assertion.h"
#include "cloud_auth/token_cache.h"
#include "identity/jwt_verifier.h"
#include "jwt_test_keys.h"

namespace tahua::cloud_auth {
namespace cloud_auth_test {  // named, not anonymous: eight test files compile as one unit
namespace bj = boost::json;

std::string privatePem(EVP_PKEY* pkey) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, pkey, nullptr, nullptr, 0, nullptr, nullptr);  // PKCS#8, as Google's key files
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  return pem;
}

// A file in a fresh temporary directory.
std::string writeFile(const std::string& name, const std::string& text) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path() / ("tahua_cloud_auth_" + std::to_string(::getpid()) + "_" + std::to_string(++counter));
  std::filesystem::create_directories(dir);
  const auto path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(JwtAssertion, SignsWhatTheVerifierAcceptsWithThePublicKey) {
  const jwt::Signer keys(jwt::Alg::RS256, "key-1");
  auto made = RsaKey::fromPem(privatePem(keys.pkey));
  ASSERT_TRUE(std::holds_alternative<std::shared_ptr<const RsaKey>>(made)) << std::get<std::string>(made);
  const auto& key = *std::get<std::shared_ptr<const RsaKey>>(made);
  const std::int64_t now = 1'900'000'000;
  const bj::object claims{{"iss", "sa@p.iam.gserviceaccount.com"},
                          {"scope", google::kCloudPlatformScope},
                          {"aud", "https://oauth2.googleapis.com/token"},
                          {"iat", now},
                          {"exp", now + 3600}};
  const std::string assertion = signJwt(key, claims, {{"kid", "key-1"}});
  ASSERT_FALSE(assertion.empty());

  jwt::Token token;
  ASSERT_FALSE(jwt::parse(assertion, token));
  EXPECT_EQ(token.alg, jwt::Alg::RS256);
  EXPECT_EQ(token.kid, "key-1");
  EXPECT_EQ(token.claims.at("scope").as_string(), google::kCloudPlatformScope);
  std::string error;
  auto jwk = jwt::keyFromJwk(keys.jwk(), error);
  ASSERT_TRUE(jwk) << error;
  const auto set = jwt::KeySet::of({jwk});
  const std::string audiences[] = {"https://oauth2.googleapis.com/token"};
  const jwt::Policy policy{"sa@p.iam.gserviceaccount.com", audiences, 0, now + 10};
  EXPECT_FALSE(jwt::verify(token, *set, policy));

  // Another key's public half does not verify it; a changed claim breaks the signature.
  const jwt::Signer other(jwt::Alg::RS256, "key-1");
  auto other_jwk = jwt::keyFromJwk(other.jwk(), error);
  EXPECT_EQ(jwt::verify(token, *jwt::KeySet::of({other_jwk}), policy), jwt::Failure::BadSignature);
  std::string forged = assertion;
  const auto dot = forged.find('.');
  bj::object changed = claims;
  changed["iss"] = "mallory@p.iam.gserviceaccount.com";
  forged.replace(dot + 1, forged.find('.', dot + 1) - dot - 1, base64UrlEncode(bj::serialize(changed)));
  jwt::Token forged_token;
  ASSERT_FALSE(jwt::parse(forged, forged_token));
  EXPECT_EQ(jwt::verify(forged_token, *set, jwt::Policy{"mallory@p.iam.gserviceaccount.com", audiences, 0, now + 10}),
            jwt::Failure::BadSignature);
}

TEST(JwtAssertion, RefusesWhatIsNotAnRsaPrivateKeyWithoutQuotingIt) {
  const std::string garbage = "-----BEGIN PRIVATE KEY-----\nTOPSECRETMATERIAL\n-----END PRIVATE KEY-----\n";
  auto made = RsaKey::fromPem(garbage);
  ASSERT_TRUE(std::holds_alternative<std::string>(made));
  EXPECT_EQ(std::get<std::string>(made).find("TOPSECRET"), std::string::npos) << std::get<std::string>(made);
  const jwt::Signer ec(jwt::Alg::ES256, "ec");
  made = RsaKey::fromPem(privatePem(ec.pkey));
  ASSERT_TRUE(std::holds_alternative<std::string>(made));
  EXPECT_NE(std::get<std::string>(made).find("not an RSA key"), std::string::npos);
  EXPECT_TRUE(std::holds_alternative<std::string>(RsaKey::fromPem("no pem here")));
}

TEST(GoogleCredentials, ReadsEachTypeAndNamesWhatIsWrong) {
  const jwt::Signer keys(jwt::Alg::RS256, "k");
  const std::string pem = privatePem(keys.pkey);
  bj::object sa{{"type", "service_account"},   {"project_id", "my-project"}, {"private_key_id", "k"},
                {"private_key", pem},          {"client_email", "sa@my-project.iam.gserviceaccount.com"},
                {"token_uri", "http://127.0.0.1:9/token"}};
  auto read = google::readCredentialsFile(writeFile("sa.json", bj::serialize(sa)));
  ASSERT_TRUE(std::holds_alternative<google::CredentialsFile>(read)) << std::get<std::string>(read);
  EXPECT_EQ(std::get<google::CredentialsFile>(read).project_id, "my-project");
  EXPECT_EQ(std::get<google::CredentialsFile>(read).source->describe(),
            "service account sa@my-project.iam.gserviceaccount.com (sa.json)");

  // A broken key: the error says so without a line of it.
  sa["private_key"] = pem.substr(0, pem.size() / 2) + "\n-----END PRIVATE KEY-----\n";
  read = google::readCredentialsFile(writeFile("sa.json", bj::serialize(sa)));
  ASSERT_TRUE(std::holds_alternative<std::string>(read));
  const std::string& why = std::get<std::string>(read);
  EXPECT_NE(why.find("private_key"), std::string::npos) << why;
  EXPECT_EQ(why.find(pem.substr(40, 30)), std::string::npos) << why;

  read = google::readCredentialsFile(writeFile("user.json", R"({"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r","quota_project_id":"q-proj"})"));
  ASSERT_TRUE(std::holds_alternative<google::CredentialsFile>(read)) << std::get<std::string>(read);
  EXPECT_EQ(std::get<google::CredentialsFile>(read).project_id, "q-proj");

  read = google::readCredentialsFile(writeFile("wif.json", R"({"type":"external_account","audience":"//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/x",
    "subject_token_type":"urn:ietf:params:oauth:token-type:jwt","token_url":"https://sts.googleapis.com/v1/token",
    "service_account_impersonation_url":"https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/sa@p.iam.gserviceaccount.com:generateAccessToken",
    "credential_source":{"file":"/var/run/secrets/token"}})"));
  ASSERT_TRUE(std::holds_alternative<google::CredentialsFile>(read)) << std::get<std::string>(read);
  EXPECT_EQ(std::get<google::CredentialsFile>(read).source->describe(),
            "workload identity federation as sa@p.iam.gserviceaccount.com (wif.json)");

  const auto fails = [](const std::string& text) {
    auto r = google::readCredentialsFile(writeFile("c.json", text));
    return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : std::string("(accepted)");
  };
  EXPECT_EQ(fails(R"({"type":"impersonated_service_account"})"),
            "type \"impersonated_service_account\" is not supported (service_account, authorized_user, external_account)");
  EXPECT_EQ(fails(R"({"client_email":"x"})"), "no \"type\" (service_account, authorized_user, external_account)");
  EXPECT_EQ(fails(R"({"type":"authorized_user","client_id":"c"})"), "authorized_user needs client_id, client_secret and refresh_token");
  EXPECT_EQ(fails(R"({"type":"external_account","audience":"a","subject_token_type":"t","token_url":"https://sts.googleapis.com/v1/token","credential_source":{"environment_id":"aws1"}})"),
            "external_account's credential_source is an AWS environment (environment_id): only file and url sources are supported");
  EXPECT_EQ(fails("[1,2]"), "not a JSON object");
  EXPECT_NE(fails("{").find("not a JSON object"), std::string::npos);
  auto missing = google::readCredentialsFile("/nonexistent/key.json");
  EXPECT_EQ(std::get<std::string>(missing), "cannot read /nonexistent/key.json");
}

// A source answering from a script, one entry per fetch; each fetch is announced.
struct ScriptedSource final : TokenSource {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<FetchResult> script;
    int fetches = 0;
    int hold_at = 0;        // this fetch waits until released: the one before it is installed by then
    bool released = false;
  };
  explicit ScriptedSource(std::shared_ptr<Shared> s) : shared(std::move(s)) {}
  std::string describe() const override { return "scripted"; }
  FetchResult fetch(BlockingHttpClient&) override {
    std::unique_lock lock(shared->mu);
    ++shared->fetches;
    shared->cv.notify_all();
    if (shared->fetches == shared->hold_at) shared->cv.wait_for(lock, std::chrono::seconds(20), [&] { return shared->released; });
    if (shared->script.empty()) return std::string("script ended");
    FetchResult r = std::move(shared->script.front());
    shared->script.pop_front();
    return r;
  }
  std::shared_ptr<Shared> shared;
};

struct Arrival final : TokenWaiter {
  std::mutex mu;
  std::condition_variable cv;
  bool arrived = false;
  void tokenArrived() override {
    std::lock_guard lock(mu);
    arrived = true;
    cv.notify_all();
  }
};

AccessToken tokenFor(const std::string& value, std::chrono::milliseconds life) { return {value, WallClock::now() + life}; }

TEST(TokenCache, FetchesOnItsThreadRefreshesBeforeExpiryAndKeepsTheTokenWhenARefreshFails) {
  auto shared = std::make_shared<ScriptedSource::Shared>();
  shared->script = {std::string("the endpoint is down"), tokenFor("t1", std::chrono::seconds(6)), std::string("refresh refused")};
  shared->hold_at = 4;  // the retry after the refused refresh
  TokenCache cache;
  auto slot = cache.slot("k", [&] { return std::make_unique<ScriptedSource>(shared); });
  // The same credential is one entry.
  EXPECT_EQ(cache.slot("k", [&] { return std::make_unique<ScriptedSource>(shared); }), slot);
  auto arrival = std::make_shared<Arrival>();
  ASSERT_TRUE(slot->await(arrival));
  EXPECT_TRUE(slot->state()->token.empty());
  cache.start();  // nothing is fetched before

  {  // The failure, retried after kFirstRetry, then the token: the waiter is told.
    std::unique_lock lock(arrival->mu);
    ASSERT_TRUE(arrival->cv.wait_for(lock, std::chrono::seconds(5), [&] { return arrival->arrived; }));
  }
  auto state = slot->state();
  EXPECT_EQ(state->token, "t1");
  EXPECT_TRUE(state->usable(SteadyClock::now()));
  EXPECT_TRUE(state->error.empty());
  EXPECT_FALSE(slot->await(std::make_shared<Arrival>()));  // a token is there: nothing to wait for

  {  // Refreshed at half its six-second life: refused; retried a second later.
    std::unique_lock lock(shared->mu);
    ASSERT_TRUE(shared->cv.wait_for(lock, std::chrono::seconds(8), [&] { return shared->fetches >= 4; }));
  }
  state = slot->state();  // the refused refresh's outcome: the old token stays, with why
  EXPECT_EQ(state->error, "refresh refused");
  EXPECT_EQ(state->token, "t1");
  EXPECT_TRUE(state->usable(SteadyClock::now()));
  {
    std::lock_guard lock(shared->mu);
    shared->released = true;
    shared->cv.notify_all();
  }
  cache.stop();
}

TEST(TokenCache, RefreshesAheadOfTheEnd) {
  using std::chrono::milliseconds;
  EXPECT_EQ(TokenCache::refreshAhead(milliseconds(4'000)), milliseconds(2'000));
  EXPECT_EQ(TokenCache::refreshAhead(milliseconds(3'600'000)), milliseconds(300'000));
}

}  // namespace cloud_auth_test
}  // namespace tahua::cloud_auth
