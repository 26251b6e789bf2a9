// The vertex type's settings (config/provider_kind.h): the Google Cloud project and
// location its models are in, the credential whose access tokens its requests carry
// (resolved here in the order Google's libraries use, the file checked now so that a
// wrong one fails the load naming it), and the location's endpoint.
#include <cstdlib>

#include "cloud_auth/google_credentials.h"
#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
constexpr schema::Field kOptions[] = {
    schema::section("gcp", "The Google Cloud project and location, and the credential that gets access tokens.").needed(),
    kTokenWaitField,
    kDefaultMaxTokensField,
};
const schema::Table kTable("providers[] (type: vertex)",
                           "Google Cloud Vertex AI: Gemini models (`generateContent`, `streamGenerateContent`, `predict` "
                           "for embeddings) and Anthropic's Claude models (`rawPredict`, `streamRawPredict`) with OAuth2 "
                           "access tokens instead of an API key, so api_key and api_key_env are refused. `base_url` "
                           "defaults to `https://<location>-aiplatform.googleapis.com/v1` "
                           "(`https://aiplatform.googleapis.com/v1` for `global`); a model's `upstream_model` is the "
                           "publisher's model id: `claude-*` is Anthropic's, anything else Google's, "
                           "`publishers/<publisher>/models/<id>` says it outright.",
                           kOptions);

constexpr schema::Field kGcpFields[] = {
    schema::nonEmpty("project", "",
                     "The project id (or number); default: the credentials file's project_id (quota_project_id)."),
    schema::nonEmpty("location", "", "The region (`us-east5`, `europe-west1`) or `global`.").needed(),
    schema::nonEmpty("credentials_file", "",
                     "A credentials file: service_account, authorized_user or external_account (workload identity "
                     "federation). Unset: GOOGLE_APPLICATION_CREDENTIALS, then gcloud's application-default file, then "
                     "the metadata server (GKE, GCE, Cloud Run; GCE_METADATA_HOST moves it)."),
    schema::nonEmpty("token_file", "",
                     "Instead: a file holding a bearer token that something else keeps fresh (read every minute)."),
};
const schema::Table kGcp("providers[] (type: vertex).gcp",
                         "Where the models are and whose access tokens the requests carry; checked at load: a credentials "
                         "file of another type, unreadable or incomplete, fails it naming the file.",
                         kGcpFields);

bool gcpName(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (in.has("default_max_tokens")) out.default_max_tokens = in.integer("default_max_tokens");
  if (in.has("token_wait")) out.token_wait = in.duration("token_wait");
  if (!in.has("gcp")) in.fail("gcp", "required for type vertex (project, location and credentials)");
  const auto gcp = in.section("gcp", kGcp);
  GcpConfig& g = out.gcp;
  if (!gcp->has("location")) gcp->fail("location", "required (a region such as us-east5, or global)");
  g.location = gcp->text("location");
  if (!gcpName(g.location)) gcp->fail("location", "not a Google Cloud location name");
  if (gcp->has("credentials_file") && gcp->has("token_file"))
    gcp->fail("token_file", "set credentials_file or token_file, not both");

  // The credential, in the order Google's libraries look for one.
  std::string project_from_file;
  if (gcp->has("token_file")) {
    g.token_file = gcp->text("token_file");
    g.credentials_origin = "token_file";
  } else {
    if (gcp->has("credentials_file")) {
      g.credentials_file = gcp->text("credentials_file");
      g.credentials_origin = "credentials_file";
    } else if (const char* env = std::getenv("GOOGLE_APPLICATION_CREDENTIALS"); env && *env) {
      g.credentials_file = env;
      g.credentials_origin = "GOOGLE_APPLICATION_CREDENTIALS";
    } else if (std::string known = cloud_auth::google::wellKnownCredentialsFile(); !known.empty()) {
      g.credentials_file = std::move(known);
      g.credentials_origin = "gcloud's application-default credentials";
    }
    if (!g.credentials_file.empty()) {
      auto read = cloud_auth::google::readCredentialsFile(g.credentials_file);
      if (auto* why = std::get_if<std::string>(&read)) {
        const std::string from = g.credentials_origin == "credentials_file" ? "" : " (from " + g.credentials_origin + ")";
        gcp->fail("credentials_file", g.credentials_file + from + ": " + *why);
      }
      project_from_file = std::get<cloud_auth::google::CredentialsFile>(read).project_id;
    } else {
      g.credentials_origin = "the metadata server";
    }
  }
  if (gcp->has("project")) g.project = gcp->text("project");
  else g.project = project_from_file;
  if (g.project.empty()) gcp->fail("project", "required (the credentials name no project)");
  if (!gcpName(g.project)) gcp->fail("project", "not a Google Cloud project id or number");
}

std::string defaultBaseUrl(const ProviderConfig& p) {
  if (p.gcp.location == "global") return "https://aiplatform.googleapis.com/v1";
  return "https://" + p.gcp.location + "-aiplatform.googleapis.com/v1";
}
}  // namespace

extern const ProviderKind kVertexKind{.type = "vertex",
                                      .options = kOptions,
                                      .read_options = readOptions,
                                      .default_base_url = defaultBaseUrl,
                                      .api_key_refused = "vertex uses Google credentials (gcp.credentials_file, "
                                                         "GOOGLE_APPLICATION_CREDENTIALS, the metadata server or "
                                                         "gcp.token_file), not an api key"};

}  // namespace tahua
