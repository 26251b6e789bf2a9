#include "aws/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <ctime>

namespace tahua {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
constexpr char kHex[] = "0123456789abcdef";
constexpr char kHexUpper[] = "0123456789ABCDEF";

using Digest = std::array<unsigned char, 32>;

std::string toHex(const unsigned char* data, std::size_t size) {
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(kHex[data[i] >> 4]);
    out.push_back(kHex[data[i] & 0xF]);
  }
  return out;
}

bool sha256(std::string_view data, Digest& out) {
  unsigned int len = 0;
  return EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr) == 1 && len == out.size();
}

bool hmacSha256(std::string_view key, std::string_view data, Digest& out) {
  unsigned int len = 0;
  // HMAC() with an empty key needs a non-null pointer on some OpenSSL builds.
  static const unsigned char kEmpty = 0;
  const void* key_ptr = key.empty() ? static_cast<const void*>(&kEmpty) : key.data();
  const unsigned char* data_ptr = data.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(data.data());
  return HMAC(EVP_sha256(), key_ptr, static_cast<int>(key.size()), data_ptr, data.size(), out.data(), &len) != nullptr &&
         len == out.size();
}

std::string_view asView(const Digest& d) { return {reinterpret_cast<const char*>(d.data()), d.size()}; }

bool isUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XY -> byte; a malformed escape stays literal (it is then encoded as "%25..."), which
// is what AWS does with a query it cannot decode either.
std::string percentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = hexValue(s[i + 1]);
      const int lo = hexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// Query: split on '&', each pair on its first '='; decode then re-encode both sides so a
// raw and a pre-encoded query sign the same; sort by key, then value (byte order).
std::string canonicalQuery(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> params;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    const std::size_t eq = pair.find('=');
    const std::string_view key = pair.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    params.emplace_back(awsUriEncode(percentDecode(key), true), awsUriEncode(percentDecode(value), true));
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out.push_back('&');
    out += k;
    out.push_back('=');
    out += v;
  }
  return out;
}

// Non-S3 services sign every segment encoded once more ('/' kept as the separator); the
// path is not normalized (no "." / ".." / "//" folding): the adapter builds clean paths.
std::string canonicalUri(std::string_view path, bool double_encode) {
  if (path.empty()) return "/";
  return double_encode ? awsUriEncode(path, false) : std::string(path);
}

// Trim, collapse runs of spaces (tabs count as spaces) into one.
std::string canonicalHeaderValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  bool pending_space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

bool validHeaderName(std::string_view name) {
  if (name.empty()) return false;
  for (unsigned char c : name)
    if (c <= 0x20 || c >= 0x7F || c == ':') return false;
  return true;
}

bool validHeaderValue(std::string_view value) {
  for (unsigned char c : value)
    if ((c < 0x20 && c != '\t') || c == 0x7F) return false;
  return true;
}

// Region, service and the access key id end up in the credential scope ("a/b/c/d"):
// a '/' or whitespace would change its meaning.
bool validScopePart(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (unsigned char c : s)
    if (!(isUnreserved(c))) return false;
  return true;
}

bool validMethod(std::string_view m) {
  if (m.empty() || m.size() > 16) return false;
  return std::all_of(m.begin(), m.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

Error internal(std::string message) { return Error{ErrorKind::Internal, "AWS request signing: " + std::move(message)}; }

}  // namespace

std::string awsUriEncode(std::string_view text, bool encode_slash) {
  std::string out;
  out.reserve(text.size() + text.size() / 2);
  for (unsigned char c : text) {
    if (isUnreserved(c) || (c == '/' && !encode_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHexUpper[c >> 4]);
      out.push_back(kHexUpper[c & 0xF]);
    }
  }
  return out;
}

std::string awsSha256Hex(std::string_view data) {
  Digest d{};
  if (!sha256(data, d)) return {};
  return toHex(d.data(), d.size());
}

std::variant<SigV4Result, Error> signAwsV4(const SigV4Request& request, const AwsCredentials& credentials) {
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty())
    return internal("the access key id or secret access key is empty");
  if (!validScopePart(credentials.access_key_id)) return internal("the access key id has invalid characters");
  if (!validScopePart(request.region)) return internal("the region is empty or has invalid characters");
  if (!validScopePart(request.service)) return internal("the service is empty or has invalid characters");
  if (!validMethod(request.method)) return internal("invalid HTTP method");
  if (request.host.empty() || !validHeaderValue(request.host)) return internal("invalid host");
  if (!validHeaderValue(credentials.session_token)) return internal("the session token has invalid characters");
  if (!request.path.empty() && request.path.front() != '/') return internal("the path must start with '/'");
  for (unsigned char c : request.path)
    if (c <= 0x20 || c >= 0x7F) return internal("the path must be percent-encoded");

  // Time: "YYYYMMDDTHHMMSSZ" and its date part for the scope.
  const std::time_t t = std::chrono::system_clock::to_time_t(request.time);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return internal("time out of range");
  char amz_date[32];
  if (std::strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm) != 16) return internal("time out of range");
  const std::string_view amz_date_view(amz_date, 16);
  const std::string_view date = amz_date_view.substr(0, 8);

  const std::string payload_hash = awsSha256Hex(request.payload);
  if (payload_hash.empty()) return internal("SHA-256 failed");

  // Canonical headers: lower-case names, sorted; repeated names joined with ','.
  std::vector<std::pair<std::string, std::string>> headers;
  headers.reserve(request.headers.size() + 4);
  for (const auto& [name, value] : request.headers) {
    if (!validHeaderName(name)) return internal("invalid header name");
    if (!validHeaderValue(value)) return internal("invalid value for header " + name);
    std::string lname = lower(name);
    // These are the signer's own; a caller copy would be signed twice or disagree.
    if (lname == "host" || lname == "authorization" || lname.rfind("x-amz-", 0) == 0)
      return internal("header " + lname + " is set by the signer");
    headers.emplace_back(std::move(lname), canonicalHeaderValue(value));
  }
  headers.emplace_back("host", canonicalHeaderValue(request.host));
  headers.emplace_back("x-amz-date", std::string(amz_date_view));
  if (!credentials.session_token.empty())
    headers.emplace_back("x-amz-security-token", canonicalHeaderValue(credentials.session_token));
  if (request.add_content_sha256) headers.emplace_back("x-amz-content-sha256", payload_hash);
  // Stable: repeated headers keep the caller's order when joined.
  std::stable_sort(headers.begin(), headers.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

  std::string canonical_headers;
  std::string signed_headers;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      canonical_headers.pop_back();  // the '\n' of the previous line
      canonical_headers.push_back(',');
    } else {
      if (!signed_headers.empty()) signed_headers.push_back(';');
      signed_headers += headers[i].first;
      canonical_headers += headers[i].first;
      canonical_headers.push_back(':');
    }
    canonical_headers += headers[i].second;
    canonical_headers.push_back('\n');
  }

  SigV4Result result;
  std::string& creq = result.canonical_request;
  creq.reserve(256 + canonical_headers.size() + request.path.size() * 2 + request.query.size() * 2);
  creq.append(request.method).push_back('\n');
  creq.append(canonicalUri(request.path, request.double_encode_path)).push_back('\n');
  creq.append(canonicalQuery(request.query)).push_back('\n');
  creq.append(canonical_headers).push_back('\n');
  creq.append(signed_headers).push_back('\n');
  creq.append(payload_hash);

  const std::string creq_hash = awsSha256Hex(creq);
  if (creq_hash.empty()) return internal("SHA-256 failed");

  std::string scope;
  scope.append(date).append("/").append(request.region).append("/").append(request.service).append("/aws4_request");

  std::string& sts = result.string_to_sign;
  sts.append(kAlgorithm).append("\n").append(amz_date_view).append("\n").append(scope).append("\n").append(creq_hash);

  // kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")
  Digest k_date{}, k_region{}, k_service{}, k_signing{}, sig{};
  const std::string k_secret = "AWS4" + credentials.secret_access_key;
  if (!hmacSha256(k_secret, date, k_date) || !hmacSha256(asView(k_date), request.region, k_region) ||
      !hmacSha256(asView(k_region), request.service, k_service) ||
      !hmacSha256(asView(k_service), "aws4_request", k_signing) || !hmacSha256(asView(k_signing), sts, sig))
    return internal("HMAC-SHA256 failed");
  result.signature = toHex(sig.data(), sig.size());

  std::string authorization;
  authorization.append(kAlgorithm)
      .append(" Credential=")
      .append(credentials.access_key_id)
      .append("/")
      .append(scope)
      .append(", SignedHeaders=")
      .append(signed_headers)
      .append(", Signature=")
      .append(result.signature);

  result.headers.emplace_back("Authorization", std::move(authorization));
  result.headers.emplace_back("X-Amz-Date", std::string(amz_date_view));
  if (!credentials.session_token.empty()) result.headers.emplace_back("X-Amz-Security-Token", credentials.session_token);
  if (request.add_content_sha256) result.headers.emplace_back("X-Amz-Content-Sha256", payload_hash);
  return result;
}

}  // namespace tahua
