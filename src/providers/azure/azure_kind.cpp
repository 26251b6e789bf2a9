// The azure-openai type's settings (config/provider_kind.h): the api-version query
// parameter every request carries is required; base_url is the resource's endpoint. The
// key is an api-key, or, with an `azure` section, Microsoft Entra ID: the credential is
// resolved here (the config's, else the environment's in the order of Azure's identity
// libraries: AZURE_CLIENT_SECRET, AZURE_CLIENT_CERTIFICATE_PATH,
// AZURE_FEDERATED_TOKEN_FILE, then a managed identity) and a certificate is read now, so
// that a wrong one fails the load naming it.
#include <cstdlib>
#include <tuple>

#include "cloud_auth/azure_credentials.h"
#include "config/config.h"
#include "config/provider_kind.h"
#include "http/http_url.h"

namespace tahua {

namespace {
constexpr schema::Field kOptions[] = {
    schema::nonEmpty("api_version", "", "The `api-version` query parameter every request carries (e.g. \"2024-10-21\").")
        .needed(),
    kStreamUsageField,
    schema::section("azure",
                    "Microsoft Entra ID instead of an api-key: the credential whose bearer tokens the requests carry "
                    "(resources with `disableLocalAuth` accept nothing else). Not with api_key or api_key_env."),
    kTokenWaitField,
};
const schema::Table kTable("providers[] (type: azure-openai)",
                           "Azure OpenAI: `base_url` is the resource's endpoint (`https://RESOURCE.openai.azure.com/openai`), "
                           "a model's `upstream_model` the Azure deployment; the key is sent as `api-key`, or an `azure` "
                           "section gets Entra ID access tokens sent as `Authorization: Bearer`.",
                           kOptions);

constexpr schema::Field kAzureFields[] = {
    schema::choice("auth", "entra | api_key", "entra",
                   "entra: the bearer tokens of the credential below; api_key: the `api-key` header (api_key or "
                   "api_key_env), as without the section."),
    schema::nonEmpty("tenant_id", "",
                     "The directory (tenant) id or domain of the app registration; default: AZURE_TENANT_ID. Not with "
                     "managed_identity."),
    schema::nonEmpty("client_id", "",
                     "The app registration's (or workload identity's) client id; default: AZURE_CLIENT_ID. Not with "
                     "managed_identity (its own client_id names a user-assigned identity)."),
    schema::nonEmpty("client_secret_env", "",
                     "The environment variable holding a client secret (never the secret itself), read at start; unset: "
                     "a warning, and the provider's models answer 503."),
    schema::nonEmpty("certificate_file", "",
                     "Instead: a PEM file holding the app's certificate and its RSA private key; the token request "
                     "carries a client assertion signed with it (RS256, `x5t#S256`). Read and checked at load."),
    schema::nonEmpty("federated_token_file", "",
                     "Instead: workload identity federation (AKS): a projected service account token, read again for "
                     "every refresh and sent as the client assertion. Default: AZURE_FEDERATED_TOKEN_FILE."),
    schema::section("managed_identity",
                    "Instead: a managed identity (`{}` for the system-assigned one), through App Service / Container "
                    "Apps' IDENTITY_ENDPOINT and IDENTITY_HEADER when set, else the instance metadata service "
                    "(169.254.169.254; AZURE_POD_IDENTITY_AUTHORITY_HOST moves it). The default when no other credential "
                    "is configured or in the environment."),
    schema::nonEmpty("authority_host", "https://login.microsoftonline.com",
                     "The Entra ID authority: `https://login.microsoftonline.us` (US Government), "
                     "`https://login.chinacloudapi.cn` (China); default: AZURE_AUTHORITY_HOST, else the public cloud's."),
    schema::nonEmpty("scope", "https://cognitiveservices.azure.com/.default",
                     "The token's scope (a managed identity's resource: the scope without `/.default`)."),
};
const schema::Table kAzure("providers[] (type: azure-openai).azure",
                           "Exactly one credential: client_secret_env, certificate_file, federated_token_file or "
                           "managed_identity; none of them: the environment's (AZURE_CLIENT_SECRET, "
                           "AZURE_CLIENT_CERTIFICATE_PATH, AZURE_FEDERATED_TOKEN_FILE), else a managed identity.",
                           kAzureFields);

constexpr schema::Field kManagedIdentityFields[] = {
    schema::nonEmpty("client_id", "", "A user-assigned identity's client id; unset: the system-assigned identity."),
};
const schema::Table kManagedIdentity("providers[] (type: azure-openai).azure.managed_identity",
                                     "The identity of the host the gateway runs on.", kManagedIdentityFields);

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string();
}

// A tenant id (a GUID or a domain) or a client id, spliced into a URL or a form.
bool entraName(std::string_view s) {
  if (s.empty() || s.size() > 256) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'))
      return false;
  return true;
}

// The credential and its settings: `az` is the azure section (auth: entra).
void readEntra(const ProviderOptions& in, const ProviderOptions& az, ProviderConfig& out) {
  AzureConfig& a = out.azure;
  constexpr std::string_view kMethods[] = {"client_secret_env", "certificate_file", "federated_token_file",
                                           "managed_identity"};
  std::string_view chosen;
  for (std::string_view m : kMethods) {
    if (!az.has(m)) continue;
    if (!chosen.empty()) az.fail(m, "set one of client_secret_env, certificate_file, federated_token_file or "
                                    "managed_identity, not both " + std::string(chosen) + " and " + std::string(m));
    chosen = m;
  }
  if (chosen == "managed_identity")
    for (std::string_view f : {"tenant_id", "client_id", "authority_host"})
      if (az.has(f))
        az.fail(f, "not used with managed_identity" +
                       std::string(f == "client_id" ? " (a user-assigned identity is managed_identity.client_id)" : ""));

  // Nothing configured: the environment's credential, as DefaultAzureCredential finds it.
  std::string from_env;
  if (chosen.empty()) {
    if (!env("AZURE_CLIENT_SECRET").empty()) from_env = "AZURE_CLIENT_SECRET";
    else if (!env("AZURE_CLIENT_CERTIFICATE_PATH").empty()) from_env = "AZURE_CLIENT_CERTIFICATE_PATH";
    else if (!env("AZURE_FEDERATED_TOKEN_FILE").empty()) from_env = "AZURE_FEDERATED_TOKEN_FILE";
  }
  if (chosen == "client_secret_env" || from_env == "AZURE_CLIENT_SECRET") {
    a.credential = EntraCredential::ClientSecret;
    a.client_secret_env = chosen.empty() ? from_env : az.text("client_secret_env");
    a.client_secret = env(a.client_secret_env.c_str());
    if (a.client_secret.empty()) {
      out.usable = false;
      in.warn("provider \"" + out.name + "\": environment variable " + a.client_secret_env +
              " (its Entra ID client secret) is not set; its models answer 503 until it is");
    }
  } else if (chosen == "certificate_file" || from_env == "AZURE_CLIENT_CERTIFICATE_PATH") {
    a.credential = EntraCredential::Certificate;
    a.certificate_file = chosen.empty() ? env("AZURE_CLIENT_CERTIFICATE_PATH") : az.text("certificate_file");
    auto read = cloud_auth::azure::readCertificateFile(a.certificate_file);
    if (auto* why = std::get_if<std::string>(&read))
      az.fail("certificate_file",
              a.certificate_file + (chosen.empty() ? " (from AZURE_CLIENT_CERTIFICATE_PATH)" : "") + ": " + *why);
  } else if (chosen == "federated_token_file" || from_env == "AZURE_FEDERATED_TOKEN_FILE") {
    a.credential = EntraCredential::WorkloadIdentity;
    a.federated_token_file = chosen.empty() ? env("AZURE_FEDERATED_TOKEN_FILE") : az.text("federated_token_file");
  } else {
    a.credential = EntraCredential::ManagedIdentity;
  }
  a.origin = chosen.empty() ? (from_env.empty() ? std::string("the default (a managed identity)") : from_env)
                            : "azure." + std::string(chosen);

  if (az.has("scope")) a.scope = az.text("scope");
  else a.scope = std::string(cloud_auth::azure::kCognitiveServicesScope);
  if (a.scope.find_first_of(" \t\r\n?#&") != std::string::npos || a.scope.find("://") == std::string::npos)
    az.fail("scope", "not a scope URI (https://cognitiveservices.azure.com/.default)");

  if (a.credential == EntraCredential::ManagedIdentity) {
    if (az.has("managed_identity")) {
      const auto mi = az.section("managed_identity", kManagedIdentity);
      if (mi->has("client_id")) a.client_id = mi->text("client_id");
      if (!a.client_id.empty() && !entraName(a.client_id)) mi->fail("client_id", "not a client id");
    } else {
      // The environment's default identity, as Azure's libraries take it.
      a.client_id = env("AZURE_CLIENT_ID");
      if (!a.client_id.empty() && !entraName(a.client_id))
        az.fail("managed_identity", "AZURE_CLIENT_ID is not a client id");
      if (az.has("tenant_id") || az.has("client_id"))
        az.fail(az.has("tenant_id") ? "tenant_id" : "client_id",
                "needs a credential of the app: client_secret_env, certificate_file or federated_token_file (none is "
                "set, nor AZURE_CLIENT_SECRET, AZURE_CLIENT_CERTIFICATE_PATH or AZURE_FEDERATED_TOKEN_FILE)");
    }
    return;
  }

  // An app registration (or a workload identity): its tenant, its client id, the authority.
  const std::string what = a.origin;
  for (auto [field, variable, value] : {std::tuple{"tenant_id", "AZURE_TENANT_ID", &a.tenant_id},
                                        std::tuple{"client_id", "AZURE_CLIENT_ID", &a.client_id}}) {
    *value = az.has(field) ? az.text(field) : env(variable);
    if (value->empty()) az.fail(field, std::string("required with ") + what + " (or " + variable + " in the environment)");
    if (!entraName(*value))
      az.fail(field, std::string("not a valid ") + (field == std::string_view("tenant_id") ? "tenant" : "client") + " id" +
                         (az.has(field) ? "" : std::string(" (from ") + variable + ")"));
  }
  a.authority_host = az.has("authority_host") ? az.text("authority_host") : env("AZURE_AUTHORITY_HOST");
  if (a.authority_host.empty()) a.authority_host = std::string(cloud_auth::azure::kDefaultAuthorityHost);
  std::string error;
  const auto url = parseHttpUrl(a.authority_host, &error, true);
  if (!url || url->target.find_first_of("?#") != std::string::npos)
    az.fail("authority_host", "not an http(s) URL without a query (" + (url ? std::string("it has one") : error) + ")" +
                                  (az.has("authority_host") ? "" : " (from AZURE_AUTHORITY_HOST)"));
  while (a.authority_host.back() == '/') a.authority_host.pop_back();
}

void readOptions(const ProviderOptions& in, ProviderConfig& out) {
  if (!in.has("api_version")) in.fail("api_version", "required for type azure-openai (e.g. \"2024-10-21\")");
  out.api_version = in.text("api_version");
  if (out.api_version.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") != std::string::npos)
    in.fail("api_version", "unexpected characters");
  if (in.has("stream_usage")) out.stream_usage = in.boolean("stream_usage");
  if (in.has("token_wait")) out.token_wait = in.duration("token_wait");
  if (!in.has("azure")) {
    if (in.has("token_wait")) in.fail("token_wait", "only with an azure section (Entra ID): an api-key needs no wait");
    return;
  }
  const auto az = in.section("azure", kAzure);
  const std::string auth = az->has("auth") ? az->text("auth") : "entra";
  if (auth == "api_key") {
    for (const schema::Field& f : kAzureFields)
      if (f.name != "auth" && az->has(f.name)) az->fail(f.name, "only with auth: entra");
    if (in.has("token_wait")) in.fail("token_wait", "only with auth: entra (an api-key needs no wait)");
    if (!in.has("api_key") && !in.has("api_key_env")) az->fail("auth", "api_key needs api_key or api_key_env");
    return;
  }
  if (auth != "entra") az->fail("auth", "one of: entra | api_key");
  for (std::string_view key : {"api_key", "api_key_env"})
    if (in.has(key))
      in.fail(key, "not with azure.auth: entra (the requests carry Entra ID bearer tokens, not an api-key); remove one");
  readEntra(in, *az, out);
}
}  // namespace

extern const ProviderKind kAzureOpenAIKind{.type = "azure-openai", .options = kOptions, .read_options = readOptions};

}  // namespace tahua
