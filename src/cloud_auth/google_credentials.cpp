#include "cloud_auth/google_credentials.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "cloud_auth/jwt_assertion.h"
#include "cloud_auth/token_endpoint.h"
#include "core/json_read.h"
#include "core/sha256.h"
#include "http/http_url.h"
#include "net/http_client.h"

namespace tahua::cloud_auth::google {

namespace bj = boost::json;

namespace {

// An https URL (or http: a test's, a private endpoint's) a file names, checked.
std::optional<std::string> badUrl(std::string_view url, std::string_view field) {
  std::string error;
  if (parseHttpUrl(url, &error, true)) return std::nullopt;
  return std::string(field) + " is not an http(s) URL: " + error;
}

OutboundResponse post(BlockingHttpClient& http, const std::string& url, std::string body, std::string_view content_type,
                      std::vector<std::pair<std::string, std::string>> headers = {}) {
  headers.emplace_back("Content-Type", std::string(content_type));
  return callTokenIssuer(http, "POST", url, std::move(body), std::move(headers));
}

// ---- service_account: an RS256 assertion exchanged at token_uri (RFC 7523) ----------

class ServiceAccountSource final : public TokenSource {
 public:
  ServiceAccountSource(std::string file, std::string email, std::string key_id, std::string token_uri,
                       std::shared_ptr<const RsaKey> key)
      : file_(std::move(file)), email_(std::move(email)), key_id_(std::move(key_id)), token_uri_(std::move(token_uri)),
        key_(std::move(key)) {}

  std::string describe() const override { return "service account " + email_ + " (" + fileName(file_) + ")"; }

  FetchResult fetch(BlockingHttpClient& http) override {
    const std::int64_t now = nowSeconds();
    bj::object claims{{"iss", email_}, {"scope", kCloudPlatformScope}, {"aud", token_uri_}, {"iat", now}, {"exp", now + 3600}};
    bj::object header;
    if (!key_id_.empty()) header["kid"] = key_id_;
    const std::string assertion = signJwt(*key_, claims, header);
    if (assertion.empty()) return std::string("cannot sign the token request with the key of ") + describe();
    const auto r = post(http, token_uri_,
                        formBody({{"grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"}, {"assertion", assertion}}),
                        "application/x-www-form-urlencoded");
    return tokenFromAnswer("the token endpoint", token_uri_, r, {assertion});
  }

 private:
  std::string file_, email_, key_id_, token_uri_;
  std::shared_ptr<const RsaKey> key_;
};

// ---- authorized_user: a refresh token (gcloud's application-default login) ---------

class AuthorizedUserSource final : public TokenSource {
 public:
  AuthorizedUserSource(std::string file, std::string client_id, std::string client_secret, std::string refresh_token,
                       std::string token_uri)
      : file_(std::move(file)), client_id_(std::move(client_id)), client_secret_(std::move(client_secret)),
        refresh_token_(std::move(refresh_token)), token_uri_(std::move(token_uri)) {}

  std::string describe() const override { return "authorized user (" + fileName(file_) + ")"; }

  FetchResult fetch(BlockingHttpClient& http) override {
    const auto r = post(http, token_uri_,
                        formBody({{"grant_type", "refresh_token"},
                                  {"client_id", client_id_},
                                  {"client_secret", client_secret_},
                                  {"refresh_token", refresh_token_}}),
                        "application/x-www-form-urlencoded");
    return tokenFromAnswer("the token endpoint", token_uri_, r, {client_secret_, refresh_token_});
  }

 private:
  std::string file_, client_id_, client_secret_, refresh_token_, token_uri_;
};

// ---- external_account: workload identity federation (RFC 8693 at Google's STS) -----

class ExternalAccountSource final : public TokenSource {
 public:
  struct Settings {
    std::string file;
    std::string audience;
    std::string subject_token_type;
    std::string token_url;
    std::string impersonation_url;  // empty: the STS token is the access token
    std::int64_t lifetime_s = 3600;
    // Where the subject token is: a file, or a URL (with headers).
    std::string subject_file;
    std::string subject_url;
    std::vector<std::pair<std::string, std::string>> subject_headers;
    std::string json_field;  // format json: the field holding it; empty: the text itself
  };
  explicit ExternalAccountSource(Settings s) : s_(std::move(s)) {}

  std::string describe() const override {
    std::string who = "workload identity federation";
    if (const auto at = s_.impersonation_url.find("serviceAccounts/"); at != std::string::npos) {
      const std::string rest = s_.impersonation_url.substr(at + 16);
      who += " as " + rest.substr(0, rest.find(':'));
    }
    return who + " (" + fileName(s_.file) + ")";
  }

  FetchResult fetch(BlockingHttpClient& http) override {
    std::string token, why;
    if (!subjectToken(http, token, why)) return why;
    const auto r = post(http, s_.token_url,
                        formBody({{"grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"},
                                  {"audience", s_.audience},
                                  {"scope", kCloudPlatformScope},
                                  {"requested_token_type", "urn:ietf:params:oauth:token-type:access_token"},
                                  {"subject_token", token},
                                  {"subject_token_type", s_.subject_token_type}}),
                        "application/x-www-form-urlencoded");
    FetchResult federated = tokenFromAnswer("the STS endpoint", s_.token_url, r, {token});
    if (s_.impersonation_url.empty() || !std::holds_alternative<AccessToken>(federated)) return federated;
    // The federated identity acts as a service account: its own short-lived token.
    const std::string& sts = std::get<AccessToken>(federated).value;
    const std::string body = bj::serialize(bj::object{{"scope", bj::array{bj::string(kCloudPlatformScope)}},
                                                      {"lifetime", std::to_string(s_.lifetime_s) + "s"}});
    const auto ri = post(http, s_.impersonation_url, body, "application/json", {{"Authorization", "Bearer " + sts}});
    return tokenFromAnswer("the service account impersonation endpoint", s_.impersonation_url, ri, {token, sts});
  }

 private:
  // The subject token into `text`, or false and why into `error`.
  bool subjectToken(BlockingHttpClient& http, std::string& text, std::string& error) {
    std::string where;
    if (!s_.subject_file.empty()) {
      where = s_.subject_file;
      if (!readBoundedFile(s_.subject_file, kMaxCredentialFileBytes, text, error)) {
        error = "the subject token: " + error;
        return false;
      }
    } else {
      where = s_.subject_url;
      OutboundRequest req;
      auto url = parseHttpUrl(s_.subject_url, &error, true);
      if (!url) {
        error = "the subject token URL: " + error;
        return false;
      }
      req.url = std::move(*url);
      req.headers = s_.subject_headers;
      req.timeout = kTokenCallTimeout;
      const auto r = http.fetch(std::move(req));
      if (r.status < 200 || r.status > 299) {
        error = callFailure("the subject token URL", s_.subject_url, r, {});
        return false;
      }
      text = r.body;
    }
    if (!s_.json_field.empty()) {
      boost::system::error_code ec;
      const bj::value v = readJson(text, ec);
      text = !ec && v.is_object() ? textField(v.get_object(), s_.json_field) : std::string();
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
    if (text.empty()) {
      error = "the subject token at " + where + " is empty" + (s_.json_field.empty() ? "" : " (field " + s_.json_field + ")");
      return false;
    }
    return true;
  }

  Settings s_;
};

// ---- the metadata server (GCE, GKE workload identity, Cloud Run) -------------------

class MetadataSource final : public TokenSource {
 public:
  explicit MetadataSource(std::string host) : host_(std::move(host)) {}
  std::string describe() const override { return "the metadata server (" + host_ + ")"; }

  FetchResult fetch(BlockingHttpClient& http) override {
    const std::string url = "http://" + host_ + "/computeMetadata/v1/instance/service-accounts/default/token";
    OutboundRequest req;
    std::string error;
    auto parsed = parseHttpUrl(url, &error);
    if (!parsed) return "the metadata server address " + host_ + " is not valid: " + error;
    req.url = std::move(*parsed);
    req.headers = {{"Metadata-Flavor", "Google"}};
    req.timeout = kTokenCallTimeout;
    const auto r = http.fetch(std::move(req));
    if (r.status == 0)
      return "no Google credentials: no credentials_file or token_file, GOOGLE_APPLICATION_CREDENTIALS unset, and the "
             "metadata server " + url + " did not answer: " + sayable(r.error, {});
    return tokenFromAnswer("the metadata server", url, r, {});
  }

 private:
  std::string host_;
};

// ---- a token file -------------------------------------------------------------------

class TokenFileSource final : public TokenSource {
 public:
  explicit TokenFileSource(std::string path) : path_(std::move(path)) {}
  std::string describe() const override { return "the token file " + path_; }

  FetchResult fetch(BlockingHttpClient&) override {
    std::string token, why;
    if (!readBoundedFile(path_, 16 * 1024, token, why)) return why;
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' || token.back() == '\t'))
      token.pop_back();
    if (token.empty()) return "the token file " + path_ + " is empty";
    if (!headerSafe(token)) return "the token file " + path_ + " does not hold one bearer token (spaces or control characters)";
    // Its expiry is unknown: taken as two minutes, so it is read again every minute.
    return AccessToken{std::move(token), WallClock::now() + std::chrono::minutes(2)};
  }

 private:
  std::string path_;
};

std::variant<CredentialsFile, std::string> externalAccount(const std::string& path, const bj::object& o) {
  ExternalAccountSource::Settings s;
  s.file = path;
  s.audience = textField(o, "audience");
  s.subject_token_type = textField(o, "subject_token_type");
  s.token_url = textField(o, "token_url");
  s.impersonation_url = textField(o, "service_account_impersonation_url");
  if (s.audience.empty()) return std::string("external_account without audience");
  if (s.subject_token_type.empty()) return std::string("external_account without subject_token_type");
  if (s.token_url.empty()) return std::string("external_account without token_url");
  if (auto bad = badUrl(s.token_url, "token_url")) return *bad;
  if (!s.impersonation_url.empty())
    if (auto bad = badUrl(s.impersonation_url, "service_account_impersonation_url")) return *bad;
  if (const bj::value* imp = o.if_contains("service_account_impersonation"); imp && imp->is_object())
    if (const bj::value* l = imp->get_object().if_contains("token_lifetime_seconds")) {
      if (!l->is_int64() || l->get_int64() < 600 || l->get_int64() > 43200)
        return std::string("service_account_impersonation.token_lifetime_seconds must be 600 to 43200");
      s.lifetime_s = l->get_int64();
    }
  const bj::value* cs = o.if_contains("credential_source");
  if (!cs || !cs->is_object()) return std::string("external_account without credential_source");
  const bj::object& source = cs->get_object();
  s.subject_file = textField(source, "file");
  s.subject_url = textField(source, "url");
  if (s.subject_file.empty() && s.subject_url.empty()) {
    const std::string kind = source.contains("environment_id") ? "an AWS environment (environment_id)"
                             : source.contains("executable")   ? "an executable"
                                                               : "neither a file nor a url";
    return "external_account's credential_source is " + kind + ": only file and url sources are supported";
  }
  if (!s.subject_url.empty()) {
    if (auto bad = badUrl(s.subject_url, "credential_source.url")) return *bad;
    if (const bj::value* h = source.if_contains("headers"); h && h->is_object())
      for (const auto& [name, value] : h->get_object()) {
        if (!value.is_string() || value.get_string().find_first_of("\r\n") != bj::string::npos)
          return "credential_source.headers." + std::string(name) + " must be text on one line";
        s.subject_headers.emplace_back(std::string(name), std::string(value.get_string()));
      }
  }
  if (const bj::value* f = source.if_contains("format"); f && f->is_object()) {
    const std::string type = textField(f->get_object(), "type");
    if (type == "json") {
      s.json_field = textField(f->get_object(), "subject_token_field_name");
      if (s.json_field.empty()) return std::string("credential_source.format json without subject_token_field_name");
    } else if (!type.empty() && type != "text") {
      return "credential_source.format.type \"" + type + "\" is not supported (text, json)";
    }
  }
  CredentialsFile out;
  out.type = "external_account";
  out.source = std::make_unique<ExternalAccountSource>(std::move(s));
  return out;
}

}  // namespace

std::variant<CredentialsFile, std::string> readCredentialsFile(const std::string& path) {
  std::string text, why;
  if (!readBoundedFile(path, kMaxCredentialFileBytes, text, why)) return why;
  boost::system::error_code ec;
  const bj::value v = readJson(text, ec);
  // The parser's message only: quoting the text could quote the key.
  if (ec || !v.is_object()) return std::string("not a JSON object") + (ec ? " (" + ec.message() + ")" : "");
  const bj::object& o = v.get_object();
  const std::string type = textField(o, "type");
  std::variant<CredentialsFile, std::string> made;
  if (type == "service_account") {
    const std::string email = textField(o, "client_email");
    const std::string pem = textField(o, "private_key");
    std::string token_uri = textField(o, "token_uri");
    if (token_uri.empty()) token_uri = kDefaultTokenUri;
    if (email.empty()) return std::string("service_account without client_email");
    if (pem.empty()) return std::string("service_account without private_key");
    if (auto bad = badUrl(token_uri, "token_uri")) return *bad;
    auto key = RsaKey::fromPem(pem);
    if (auto* why = std::get_if<std::string>(&key)) return "service_account's private_key: " + *why;
    CredentialsFile out;
    out.type = type;
    out.project_id = textField(o, "project_id");
    out.source = std::make_unique<ServiceAccountSource>(path, email, textField(o, "private_key_id"), token_uri,
                                                        std::get<std::shared_ptr<const RsaKey>>(std::move(key)));
    made = std::move(out);
  } else if (type == "authorized_user") {
    const std::string client_id = textField(o, "client_id");
    const std::string client_secret = textField(o, "client_secret");
    const std::string refresh_token = textField(o, "refresh_token");
    std::string token_uri = textField(o, "token_uri");
    if (token_uri.empty()) token_uri = kDefaultTokenUri;
    if (client_id.empty() || client_secret.empty() || refresh_token.empty())
      return std::string("authorized_user needs client_id, client_secret and refresh_token");
    if (auto bad = badUrl(token_uri, "token_uri")) return *bad;
    CredentialsFile out;
    out.type = type;
    out.project_id = textField(o, "quota_project_id");
    out.source = std::make_unique<AuthorizedUserSource>(path, client_id, client_secret, refresh_token, token_uri);
    made = std::move(out);
  } else if (type == "external_account") {
    made = externalAccount(path, o);
  } else {
    return (type.empty() ? std::string("no \"type\"") : "type \"" + sayable(type, {}) + "\" is not supported") +
           " (service_account, authorized_user, external_account)";
  }
  if (auto* out = std::get_if<CredentialsFile>(&made)) out->digest = toHex(sha256(text)).substr(0, 16);
  return made;
}

std::string metadataHost() {
  const char* host = std::getenv("GCE_METADATA_HOST");
  return host && *host ? std::string(host) : std::string(kMetadataHost);
}

std::unique_ptr<TokenSource> metadataSource() { return std::make_unique<MetadataSource>(metadataHost()); }

std::unique_ptr<TokenSource> tokenFileSource(std::string path) { return std::make_unique<TokenFileSource>(std::move(path)); }

std::string wellKnownCredentialsFile() {
  const char* home = std::getenv("HOME");
  if (!home || !*home) return {};
  std::string path = std::string(home) + "/.config/gcloud/application_default_credentials.json";
  return std::ifstream(path).good() ? path : std::string();
}

}  // namespace tahua::cloud_auth::google
