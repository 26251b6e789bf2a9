// The azure-openai provider's Entra ID settings (src/providers/azure/azure_kind.cpp): the
// credential found in the environment in DefaultAzureCredential's order when the config
// names none, the defaults (authority host, scope, tenant and client ids), and the api-key
// path left as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "config/config.h"

namespace tahua {
namespace azure_config_test {  // named, not anonymous: eight test files compile as one unit

ConfigLoadResult load(const std::string& azure) {
  return loadConfigString("listeners: [{port: 0}]\nproviders: [{name: a, type: azure-openai, base_url: "
                          "'https://r.openai.azure.com/openai', api_version: '2024-10-21', " + azure +
                              "}]\nmodels: [{name: m, provider: a}]\n",
                          "a.yaml");
}

// Sets (or unsets) an environment variable for one test.
struct EnvVar {
  std::string name;
  std::optional<std::string> saved;
  EnvVar(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) saved = v;
    if (value) ::setenv(name.c_str(), value, 1);
    else ::unsetenv(name.c_str());
  }
  ~EnvVar() {
    if (saved) ::setenv(name.c_str(), saved->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

struct NoAzureEnv {
  EnvVar vars[9] = {{"AZURE_CLIENT_SECRET", nullptr},   {"AZURE_CLIENT_CERTIFICATE_PATH", nullptr},
                    {"AZURE_FEDERATED_TOKEN_FILE", nullptr}, {"AZURE_CLIENT_ID", nullptr},
                    {"AZURE_TENANT_ID", nullptr},       {"AZURE_AUTHORITY_HOST", nullptr},
                    {"AZURE_POD_IDENTITY_AUTHORITY_HOST", nullptr}, {"IDENTITY_ENDPOINT", nullptr},
                    {"IDENTITY_HEADER", nullptr}};
};

TEST(AzureEntraConfig, TheEnvironmentsCredentialInDefaultAzureCredentialsOrder) {
  NoAzureEnv clean;
  // Nothing anywhere: the system-assigned managed identity.
  auto r = load("azure: {}");
  ASSERT_TRUE(r.config) << r.error;
  const AzureConfig* a = &r.config->providers[0].azure;
  EXPECT_EQ(a->credential, EntraCredential::ManagedIdentity);
  EXPECT_TRUE(a->client_id.empty());
  EXPECT_EQ(a->scope, "https://cognitiveservices.azure.com/.default");
  EXPECT_EQ(r.config->providers[0].token_wait, Millis(10'000));

  EnvVar tenant("AZURE_TENANT_ID", "contoso.onmicrosoft.com");
  EnvVar client("AZURE_CLIENT_ID", "app-1");
  EnvVar federated("AZURE_FEDERATED_TOKEN_FILE", "/var/run/secrets/azure/tokens/azure-identity-token");
  r = load("azure: {}, token_wait: 2s");
  ASSERT_TRUE(r.config) << r.error;
  a = &r.config->providers[0].azure;
  EXPECT_EQ(a->credential, EntraCredential::WorkloadIdentity);
  EXPECT_EQ(a->origin, "AZURE_FEDERATED_TOKEN_FILE");
  EXPECT_EQ(a->tenant_id, "contoso.onmicrosoft.com");
  EXPECT_EQ(a->client_id, "app-1");
  EXPECT_EQ(a->authority_host, "https://login.microsoftonline.com");
  EXPECT_EQ(r.config->providers[0].token_wait, Millis(2'000));

  // A client secret in the environment comes first; the config's ids and authority win.
  EnvVar secret("AZURE_CLIENT_SECRET", "s3cret");
  EnvVar authority("AZURE_AUTHORITY_HOST", "https://login.microsoftonline.us/");
  r = load("azure: {client_id: app-2}");
  ASSERT_TRUE(r.config) << r.error;
  a = &r.config->providers[0].azure;
  EXPECT_EQ(a->credential, EntraCredential::ClientSecret);
  EXPECT_EQ(a->client_secret, "s3cret");
  EXPECT_EQ(a->client_id, "app-2");
  EXPECT_EQ(a->authority_host, "https://login.microsoftonline.us");
  EXPECT_TRUE(r.config->providers[0].usable);

  // The config's own credential is taken over the environment's.
  r = load("azure: {federated_token_file: /t, authority_host: 'http://127.0.0.1:9'}");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->providers[0].azure.credential, EntraCredential::WorkloadIdentity);
  EXPECT_EQ(r.config->providers[0].azure.federated_token_file, "/t");
  EXPECT_EQ(r.config->providers[0].azure.authority_host, "http://127.0.0.1:9");
}

TEST(AzureEntraConfig, AnUnsetSecretVariableWarnsAndTheApiKeyPathIsUnchanged) {
  NoAzureEnv clean;
  EnvVar unset("TAHUA_TEST_UNSET_SECRET", nullptr);
  auto r = load("azure: {tenant_id: t, client_id: c, client_secret_env: TAHUA_TEST_UNSET_SECRET}");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_FALSE(r.config->providers[0].usable);
  EXPECT_TRUE(std::any_of(r.warnings.begin(), r.warnings.end(),
                          [](const std::string& w) { return w.find("TAHUA_TEST_UNSET_SECRET") != std::string::npos; }));

  r = load("api_key: k");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_FALSE(r.config->providers[0].azure.entra());
  EXPECT_EQ(r.config->providers[0].api_key, "k");
  r = load("api_key: k, azure: {auth: api_key}");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_FALSE(r.config->providers[0].azure.entra());
  r = load("azure: {auth: api_key}");
  ASSERT_FALSE(r.config);
  EXPECT_NE(r.error.find("providers[0].azure.auth: api_key needs api_key or api_key_env"), std::string::npos) << r.error;
}

}  // namespace azure_config_test
}  // namespace tahua
