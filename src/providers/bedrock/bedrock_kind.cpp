// The bedrock type's settings (config/provider_kind.h): the AWS region and credentials
// that sign every request (SigV4) instead of an API key, and the region's endpoint.
#include <cstdlib>

#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
constexpr schema::Field kOptions[] = {
    schema::section("aws", "The region and the credentials that sign every request (SigV4) instead of an API key.")
        .needed(),
    kDefaultMaxTokensField,
};
const schema::Table kTable("providers[] (type: bedrock)",
                           "AWS Bedrock Runtime (Converse): requests are SigV4-signed, so api_key and api_key_env are "
                           "refused; `base_url` defaults to `https://bedrock-runtime.<region>.amazonaws.com`, a model's "
                           "`upstream_model` is the Bedrock model id.",
                           kOptions);

// Each credential literally or from a variable (read at start); a literal and its
// variable together are refused.
constexpr schema::Field kAwsFields[] = {
    schema::nonEmpty("region", "", "The AWS region (`us-east-1`).").needed(),
    schema::nonEmpty("access_key_id", "", "The access key id, literally (prefer access_key_id_env)."),
    schema::nonEmpty("access_key_id_env", "AWS_ACCESS_KEY_ID",
                     "The variable holding it; unset: a warning, and the provider's models answer 503."),
    schema::nonEmpty("secret_access_key", "", "The secret key, literally (prefer secret_access_key_env); never logged."),
    schema::nonEmpty("secret_access_key_env", "AWS_SECRET_ACCESS_KEY",
                     "The variable holding it; unset: a warning, and the provider's models answer 503."),
    schema::nonEmpty("session_token", "", "A session token (temporary credentials), literally."),
    schema::nonEmpty("session_token_env", "AWS_SESSION_TOKEN", "The variable holding it; unset: none is sent."),
};
const schema::Table kAws("providers[] (type: bedrock).aws",
                         "Bedrock's region and credentials; each credential literally or from a variable (read at start), "
                         "not both.",
                         kAwsFields);

// Each credential comes literally or from an environment variable (by default the usual
// one, the `_env` field's default: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).
void readSecret(const ProviderOptions& aws, ProviderConfig& out, std::string_view key, bool required, std::string& into) {
  const std::string env_key = std::string(key) + "_env";
  if (aws.has(key) && aws.has(env_key)) aws.fail(key, "set " + std::string(key) + " or " + env_key + ", not both");
  if (aws.has(key)) {
    into = aws.text(key);
    return;
  }
  const std::string env = aws.has(env_key) ? aws.text(env_key) : std::string(kAws.find(env_key)->fallback);
  if (const char* v = std::getenv(env.c_str()); v && *v) {
    into = v;
  } else if (required) {
    out.usable = false;
    aws.warn("provider \"" + out.name + "\": environment variable " + env + " is not set; its models answer 503 until it is");
  }
}

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (in.has("default_max_tokens")) out.default_max_tokens = in.integer("default_max_tokens");
  if (!in.has("aws")) in.fail("aws", "required for type bedrock (region and credentials)");
  const auto aws = in.section("aws", kAws);
  if (!aws->has("region")) aws->fail("region", "required");
  out.aws.region = aws->text("region");
  if (out.aws.region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
    aws->fail("region", "not an AWS region name");
  readSecret(*aws, out, "access_key_id", true, out.aws.access_key_id);
  readSecret(*aws, out, "secret_access_key", true, out.aws.secret_access_key);
  readSecret(*aws, out, "session_token", false, out.aws.session_token);
}

std::string defaultBaseUrl(const ProviderConfig& p) { return "https://bedrock-runtime." + p.aws.region + ".amazonaws.com"; }
}  // namespace

extern const ProviderKind kBedrockKind{.type = "bedrock",
                                       .options = kOptions,
                                       .read_options = readOptions,
                                       .default_base_url = defaultBaseUrl,
                                       .api_key_refused = "bedrock uses aws credentials, not an api key"};

}  // namespace tahua
