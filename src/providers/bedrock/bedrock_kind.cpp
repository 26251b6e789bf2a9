// The bedrock type's settings (config/provider_kind.h): the AWS region and credentials
// that sign every request (SigV4) instead of an API key, and the region's endpoint.
#include <cstdlib>

#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
constexpr std::string_view kOptions[] = {"aws", "default_max_tokens"};

// Each credential comes literally or from an environment variable (the usual
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN).
void readSecret(const ProviderOptions& aws, ProviderConfig& out, std::string_view key, std::string_view env_key,
                const char* default_env, bool required, std::string& into) {
  if (aws.has(key) && aws.has(env_key))
    aws.fail(key, "set " + std::string(key) + " or " + std::string(env_key) + ", not both");
  if (aws.has(key)) {
    into = aws.text(key);
    return;
  }
  const std::string env = aws.has(env_key) ? aws.text(env_key) : std::string(default_env);
  if (const char* v = std::getenv(env.c_str()); v && *v) {
    into = v;
  } else if (required) {
    out.usable = false;
    aws.warn("provider \"" + out.name + "\": environment variable " + env + " is not set; its models answer 503 until it is");
  }
}

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (in.has("default_max_tokens")) out.default_max_tokens = in.integer("default_max_tokens", 1, 10'000'000);
  if (!in.has("aws")) in.fail("aws", "required for type bedrock (region and credentials)");
  const auto aws = in.section("aws", {"region", "access_key_id", "access_key_id_env", "secret_access_key",
                                      "secret_access_key_env", "session_token", "session_token_env"});
  if (!aws->has("region")) aws->fail("region", "required");
  out.aws.region = aws->text("region");
  if (out.aws.region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
    aws->fail("region", "not an AWS region name");
  readSecret(*aws, out, "access_key_id", "access_key_id_env", "AWS_ACCESS_KEY_ID", true, out.aws.access_key_id);
  readSecret(*aws, out, "secret_access_key", "secret_access_key_env", "AWS_SECRET_ACCESS_KEY", true, out.aws.secret_access_key);
  readSecret(*aws, out, "session_token", "session_token_env", "AWS_SESSION_TOKEN", false, out.aws.session_token);
}

std::string defaultBaseUrl(const ProviderConfig& p) { return "https://bedrock-runtime." + p.aws.region + ".amazonaws.com"; }
}  // namespace

extern const ProviderKind kBedrockKind{.type = "bedrock",
                                       .options = kOptions,
                                       .read_options = readOptions,
                                       .default_base_url = defaultBaseUrl,
                                       .api_key_refused = "bedrock uses aws credentials, not an api key"};

}  // namespace tahua
