#include "aws/sigv4.h"

#include <gtest/gtest.h>

#include <string>

namespace tahua {
namespace sigv4_test {  // named, not anonymous: eight test files compile as one unit

// AWS SigV4 test suite (awslabs/aws-c-auth tests/aws-signing-test-suite/v4, the 2015 suite):
// these credentials, region, service and time for every case.
const AwsCredentials kSuiteCredentials{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
constexpr std::string_view kScope = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, ";

std::chrono::system_clock::time_point suiteTime() {
  // 2015-08-30T12:36:00Z
  return std::chrono::system_clock::time_point(std::chrono::seconds(1440938160));
}

SigV4Request suiteRequest(std::string_view method, std::string_view path = "/", std::string_view query = "") {
  SigV4Request r;
  r.method = method;
  r.host = "example.amazonaws.com";
  r.path = path;
  r.query = query;
  r.region = "us-east-1";
  r.service = "service";
  r.time = suiteTime();
  return r;
}

SigV4Result sign(const SigV4Request& r, const AwsCredentials& c = kSuiteCredentials) {
  auto out = signAwsV4(r, c);
  if (auto* e = std::get_if<Error>(&out)) {
    ADD_FAILURE() << e->message;
    return {};
  }
  return std::get<SigV4Result>(std::move(out));
}

std::string header(const SigV4Result& r, std::string_view name) {
  for (const auto& [n, v] : r.headers)
    if (n == name) return v;
  return "<absent>";
}

TEST(SigV4, GetVanilla) {
  const auto r = sign(suiteRequest("GET"));
  EXPECT_EQ(r.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(r.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  EXPECT_EQ(header(r, "Authorization"),
            std::string(kScope) +
                "SignedHeaders=host;x-amz-date, "
                "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  EXPECT_EQ(header(r, "X-Amz-Date"), "20150830T123600Z");
  EXPECT_EQ(header(r, "X-Amz-Security-Token"), "<absent>");
  EXPECT_EQ(header(r, "X-Amz-Content-Sha256"), "<absent>");
  EXPECT_EQ(r.headers.size(), 2u);
}

TEST(SigV4, PostVanilla) {
  const auto r = sign(suiteRequest("POST"));
  EXPECT_EQ(header(r, "Authorization"),
            std::string(kScope) +
                "SignedHeaders=host;x-amz-date, "
                "Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

TEST(SigV4, PostXWwwFormUrlencodedSignsContentTypeAndBody) {
  auto req = suiteRequest("POST");
  req.headers = {{"Content-Type", "application/x-www-form-urlencoded"}};
  req.payload = "Param1=value1";
  const auto r = sign(req);
  EXPECT_EQ(r.canonical_request,
            "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n"
            "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  EXPECT_EQ(header(r, "Authorization"),
            std::string(kScope) +
                "SignedHeaders=content-type;host;x-amz-date, "
                "Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a");
}

TEST(SigV4, QueryOrderKeyCase) {
  const auto r = sign(suiteRequest("GET", "/", "Param2=value2&Param1=value1"));
  EXPECT_NE(r.canonical_request.find("\nParam1=value1&Param2=value2\n"), std::string::npos);
  EXPECT_EQ(r.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4, QueryOrderEncoded) {
  const auto r = sign(suiteRequest("GET", "/", "Param-3=Value3&Param=Value2&%E1%88%B4=Value1"));
  EXPECT_NE(r.canonical_request.find("\n%E1%88%B4=Value1&Param=Value2&Param-3=Value3\n"), std::string::npos);
  EXPECT_EQ(r.signature, "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac");
}

TEST(SigV4, Utf8QueryIsEncoded) {
  const auto r = sign(suiteRequest("GET", "/", "\xE1\x88\xB4=bar"));
  EXPECT_EQ(r.signature, "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04");
}

TEST(SigV4, QueryUnreserved) {
  const auto r = sign(suiteRequest("GET", "/",
                                   "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
                                   "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"));
  EXPECT_EQ(r.signature, "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197");
}

TEST(SigV4, PathUnreserved) {
  const auto r = sign(suiteRequest("GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"));
  EXPECT_EQ(r.signature, "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f");
}

TEST(SigV4, QueryParam) {
  const auto r = sign(suiteRequest("GET", "/", "Param1=value1"));
  EXPECT_EQ(r.signature, "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb");
}

TEST(SigV4, HeaderValueTrim) {
  auto req = suiteRequest("GET");
  req.headers = {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}};
  const auto r = sign(req);
  EXPECT_NE(r.canonical_request.find("my-header1:value1\nmy-header2:\"a b c\"\n"), std::string::npos);
  EXPECT_EQ(header(r, "Authorization"),
            std::string(kScope) +
                "SignedHeaders=host;my-header1;my-header2;x-amz-date, "
                "Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736");
}

TEST(SigV4, SessionTokenIsSignedAndSent) {
  AwsCredentials c = kSuiteCredentials;
  c.session_token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
  const auto r = sign(suiteRequest("GET"), c);
  EXPECT_EQ(header(r, "Authorization"),
            std::string(kScope) +
                "SignedHeaders=host;x-amz-date;x-amz-security-token, "
                "Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8");
  EXPECT_EQ(header(r, "X-Amz-Security-Token"), c.session_token);
}

TEST(SigV4, ContentSha256WhenAsked) {
  auto req = suiteRequest("POST");
  req.add_content_sha256 = true;
  req.payload = "{}";
  const auto r = sign(req);
  const std::string hash = awsSha256Hex("{}");
  EXPECT_EQ(hash, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
  EXPECT_EQ(header(r, "X-Amz-Content-Sha256"), hash);
  EXPECT_NE(r.canonical_request.find("x-amz-content-sha256:" + hash + "\n"), std::string::npos);
  EXPECT_NE(header(r, "Authorization").find("SignedHeaders=host;x-amz-content-sha256;x-amz-date,"),
            std::string::npos);
}

// Bedrock: the model id is percent-encoded once on the wire and once more when signed.
TEST(SigV4, BedrockPathIsEncodedTwice) {
  const std::string model = "anthropic.claude-3-5-sonnet-20240620-v1:0";
  const std::string path = "/model/" + awsUriEncode(model, true) + "/converse";
  ASSERT_EQ(path, "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse");
  SigV4Request req;
  req.method = "POST";
  req.host = "bedrock-runtime.us-east-1.amazonaws.com";
  req.path = path;
  req.region = "us-east-1";
  req.service = "bedrock";
  req.time = suiteTime();
  req.headers = {{"content-type", "application/json"}, {"accept", "application/json"}};
  req.payload = R"({"messages":[]})";
  const auto r = sign(req);
  EXPECT_EQ(r.canonical_request.substr(0, r.canonical_request.rfind("\n\n")),
            "POST\n/model/anthropic.claude-3-5-sonnet-20240620-v1%253A0/converse\n\n"
            "accept:application/json\ncontent-type:application/json\n"
            "host:bedrock-runtime.us-east-1.amazonaws.com\nx-amz-date:20150830T123600Z");
  EXPECT_NE(header(r, "Authorization").find("Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, "
                                            "SignedHeaders=accept;content-type;host;x-amz-date, Signature="),
            std::string::npos);
  // S3-style (single encoding) signs differently.
  req.double_encode_path = false;
  const auto s3 = sign(req);
  EXPECT_NE(s3.canonical_request.find("\n/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse\n"),
            std::string::npos);
  EXPECT_NE(s3.signature, r.signature);
}

TEST(SigV4, RepeatedHeadersAreJoined) {
  auto req = suiteRequest("GET");
  req.headers = {{"My-Header1", "value4"}, {"my-header1", "value1"}, {"My-Header1", "value3"}};
  const auto r = sign(req);
  EXPECT_NE(r.canonical_request.find("my-header1:value4,value1,value3\n"), std::string::npos);
  EXPECT_NE(r.canonical_request.find("\nhost;my-header1;x-amz-date\n"), std::string::npos);
}

TEST(SigV4, UriEncode) {
  EXPECT_EQ(awsUriEncode("a b/c~d_e.f-g", false), "a%20b/c~d_e.f-g");
  EXPECT_EQ(awsUriEncode("a b/c", true), "a%20b%2Fc");
  EXPECT_EQ(awsUriEncode("%3A", true), "%253A");
  EXPECT_EQ(awsUriEncode("\xE1\x88\xB4+=&", true), "%E1%88%B4%2B%3D%26");
  EXPECT_EQ(awsUriEncode("arn:aws:bedrock:us-east-1:123:inference-profile/us.x", true),
            "arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.x");
}

TEST(SigV4, MalformedQueryEscapesDoNotCrash) {
  const auto r = sign(suiteRequest("GET", "/", "a=%&b=%4&c=%zz&&d&=e"));
  EXPECT_NE(r.canonical_request.find("\n=e&a=%25&b=%254&c=%25zz&d=\n"), std::string::npos);
}

TEST(SigV4, RejectsBadInputs) {
  auto bad = [](SigV4Request req, AwsCredentials c = kSuiteCredentials) {
    auto out = signAwsV4(req, c);
    return std::holds_alternative<Error>(out);
  };
  EXPECT_TRUE(bad(suiteRequest("GET"), AwsCredentials{"", "x", ""}));
  EXPECT_TRUE(bad(suiteRequest("GET"), AwsCredentials{"AKID", "", ""}));
  EXPECT_TRUE(bad(suiteRequest("GET"), AwsCredentials{"AKID", "x", "tok\r\nX-Evil: 1"}));
  auto r = suiteRequest("GET");
  r.region = "us-east-1/x";
  EXPECT_TRUE(bad(r));
  r = suiteRequest("GET");
  r.service = "";
  EXPECT_TRUE(bad(r));
  r = suiteRequest("GET");
  r.headers = {{"X-Amz-Date", "20200101T000000Z"}};
  EXPECT_TRUE(bad(r));
  r = suiteRequest("GET");
  r.headers = {{"bad name", "v"}};
  EXPECT_TRUE(bad(r));
  r = suiteRequest("GET");
  r.headers = {{"accept", "a\nb"}};
  EXPECT_TRUE(bad(r));
  r = suiteRequest("GET", "/a b");
  EXPECT_TRUE(bad(r));
  r = suiteRequest("get");
  EXPECT_TRUE(bad(r));
  const auto err = std::get<Error>(signAwsV4(suiteRequest("GET"), AwsCredentials{"", "SECRETZZ", ""}));
  EXPECT_EQ(err.kind, ErrorKind::Internal);
  EXPECT_EQ(err.message.find("SECRETZZ"), std::string::npos);  // never echoes the secret
}

}  // namespace sigv4_test
}  // namespace tahua
