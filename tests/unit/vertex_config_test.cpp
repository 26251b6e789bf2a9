// The vertex provider's config (src/providers/vertex/vertex_kind.cpp): each location's
// endpoint, the credential found in Google's order, the project taken from the
// credentials file, and the refusals, each naming its field.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "config/config.h"

namespace tahua {
namespace vertex_config_test {  // named, not anonymous: eight test files compile as one unit

ConfigLoadResult load(const std::string& provider) {
  return loadConfigString("listeners: [{port: 0}]\nproviders: [" + provider + "]\nmodels: [{name: m, provider: v}]\n", "v.yaml");
}

// The environment a test needs, put back after it.
struct Env {
  std::string name;
  std::optional<std::string> saved;
  Env(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) saved = v;
    if (value) ::setenv(name.c_str(), value, 1);
    else ::unsetenv(name.c_str());
  }
  ~Env() {
    if (saved) ::setenv(name.c_str(), saved->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

TEST(VertexConfig, EndpointsPerLocation) {
  Env adc("GOOGLE_APPLICATION_CREDENTIALS", nullptr);
  Env home("HOME", "/nonexistent");
  auto r = load("{name: v, type: vertex, gcp: {project: my-project, location: us-east5}}");
  ASSERT_TRUE(r.config) << r.error;
  const ProviderConfig& p = r.config->providers[0];
  EXPECT_EQ(p.base_url, "https://us-east5-aiplatform.googleapis.com/v1");
  EXPECT_EQ(p.base_path, "/v1");
  EXPECT_EQ(p.gcp.credentials_origin, "the metadata server");
  EXPECT_TRUE(p.gcp.credentials_file.empty());
  EXPECT_EQ(p.token_wait, Millis(10'000));
  r = load("{name: v, type: vertex, token_wait: 2s, gcp: {project: my-project, location: global}}");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->providers[0].base_url, "https://aiplatform.googleapis.com/v1");
  EXPECT_EQ(r.config->providers[0].token_wait, Millis(2'000));
}

TEST(VertexConfig, TheCredentialsFileFromTheEnvironmentGivesTheProject) {
  const auto dir = std::filesystem::temp_directory_path() / ("tahua_vertex_config_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "adc.json").string();
  std::ofstream(file) << R"({"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r","quota_project_id":"quota-proj"})";
  Env adc("GOOGLE_APPLICATION_CREDENTIALS", file.c_str());
  auto r = load("{name: v, type: vertex, gcp: {location: europe-west4}}");
  ASSERT_TRUE(r.config) << r.error;
  EXPECT_EQ(r.config->providers[0].gcp.project, "quota-proj");
  EXPECT_EQ(r.config->providers[0].gcp.credentials_file, file);
  EXPECT_EQ(r.config->providers[0].gcp.credentials_origin, "GOOGLE_APPLICATION_CREDENTIALS");

  // A bad file named by the variable: the load fails naming the variable and the file.
  std::ofstream(file) << R"({"type":"gdch_service_account"})";
  r = load("{name: v, type: vertex, gcp: {project: p1, location: europe-west4}}");
  ASSERT_FALSE(r.config);
  EXPECT_NE(r.error.find("providers[0].gcp.credentials_file: " + file + " (from GOOGLE_APPLICATION_CREDENTIALS): type \"gdch_service_account\" is not supported"),
            std::string::npos)
      << r.error;
  std::filesystem::remove_all(dir);
}

TEST(VertexConfig, RefusalsNameTheirField) {
  Env adc("GOOGLE_APPLICATION_CREDENTIALS", nullptr);
  Env home("HOME", "/nonexistent");
  const auto error = [](const std::string& provider) {
    auto r = load(provider);
    return r.config ? std::string("(loaded)") : r.error;
  };
  EXPECT_NE(error("{name: v, type: vertex}").find("providers[0].gcp: required for type vertex"), std::string::npos);
  EXPECT_NE(error("{name: v, type: vertex, gcp: {location: us-east5}}").find("providers[0].gcp.project: required"), std::string::npos);
  EXPECT_NE(error("{name: v, type: vertex, gcp: {project: P_1, location: us-east5}}").find("providers[0].gcp.project: not a Google Cloud project"),
            std::string::npos);
  EXPECT_NE(error("{name: v, type: vertex, gcp: {project: p, location: us/east5}}").find("providers[0].gcp.location: not a Google Cloud location"),
            std::string::npos);
  EXPECT_NE(error("{name: v, type: vertex, gcp: {project: p, location: us-east5, credentials_file: /nonexistent/k.json}}")
                .find("providers[0].gcp.credentials_file: /nonexistent/k.json: cannot read /nonexistent/k.json"),
            std::string::npos);
  EXPECT_NE(error("{name: v, type: vertex, api_key: k, gcp: {project: p, location: us-east5}}").find("providers[0].api_key: vertex uses Google credentials"),
            std::string::npos);
  EXPECT_NE(error("{name: v, type: vertex, gcp: {project: p, location: us-east5, region: x}}").find("region"), std::string::npos);
}

}  // namespace vertex_config_test
}  // namespace tahua
