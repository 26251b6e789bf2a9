// JSON Web Tokens signed by a company's identity provider (JWS compact form), checked
// against the provider's published keys (a JWKS). Only asymmetric algorithms are
// accepted: RS256, ES256 and EdDSA (Ed25519). `none` and every HMAC algorithm are
// refused before any key is looked at, so a token "signed" with HS256 using the RSA
// public key as the secret (the classic algorithm confusion) never verifies; a key is
// also only used with the one algorithm its JWK describes.
//
// Free of Asio and Beast: the jwt link (filters/auth/jwt_link.h) fetches the keys and
// keeps verified tokens; this file parses, builds keys (OpenSSL 3, EVP_PKEY_fromdata)
// and verifies (EVP_DigestVerify). Every input is bounded; a bad one is a precise
// Failure, never a crash and never an echo of the token.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/value.hpp>

namespace tahua::jwt {

enum class Alg : std::uint8_t { RS256, ES256, EdDSA };
std::string_view algName(Alg a);

// Why a token was refused; failureCode() is the word in logs and metrics,
// failureMessage() the client's sentence (it never repeats the token).
enum class Failure : std::uint8_t {
  Malformed,       // not three base64url segments of a JSON header and JSON claims
  TooLarge,        // the token (or its header) is over the bounds below
  UnsupportedAlg,  // none, HS256 and every other algorithm but RS256, ES256, EdDSA
  UnknownKey,      // no key of the issuer's set has the token's kid for its alg
  BadSignature,
  Expired,         // exp (plus the clock skew) has passed
  NotYetValid,     // nbf (minus the clock skew) is still ahead
  WrongIssuer,
  WrongAudience,
  MissingClaim,    // exp, or the claim the issuer's config names the subject by
};
std::string_view failureCode(Failure f);
std::string_view failureMessage(Failure f);

inline constexpr std::size_t kMaxTokenBytes = 8 << 10;   // whole compact token
inline constexpr std::size_t kMaxHeaderBytes = 1 << 10;  // the decoded header
inline constexpr std::size_t kMaxKeys = 64;              // keys kept of one JWKS
inline constexpr std::size_t kMaxJwksBytes = 256 << 10;  // a JWKS or discovery document

// One verification key of a JWKS, ready for OpenSSL. Shared between key sets: a refresh
// that lists the same key again keeps this object (and the tokens verified with it).
class Key {
 public:
  Key(std::string kid, Alg alg, std::string material, void* pkey);
  ~Key();
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;

  const std::string& kid() const { return kid_; }
  Alg alg() const { return alg_; }
  // The JWK's public numbers, concatenated: the same key has the same material.
  const std::string& material() const { return material_; }
  // Whether `signature` is this key's over `input`, with the key's algorithm.
  bool verifies(std::string_view input, std::string_view signature) const;

 private:
  std::string kid_;
  Alg alg_;
  std::string material_;
  void* pkey_;  // EVP_PKEY (kept out of this header)
};

// An issuer's keys, as one JWKS listed them.
class KeySet {
 public:
  // Reads a JWKS document. Keys of other kinds or uses (enc, HMAC "oct", other curves,
  // RSA under 2048 bits) are skipped; at most kMaxKeys are kept. `previous`: keys with the
  // same kid, algorithm and numbers are taken over from it as they are. Null with
  // `error` set when the document is not a JWKS at all.
  static std::shared_ptr<const KeySet> parse(std::string_view json, const KeySet* previous, std::string& error);
  // A set of given keys (tests, benchmarks).
  static std::shared_ptr<const KeySet> of(std::vector<std::shared_ptr<const Key>> keys);

  // The key for a token's kid and alg; without a kid, the only key of that alg (null when
  // there are several: the token must say which).
  const Key* find(std::string_view kid, Alg alg) const;
  bool contains(const Key* key) const;
  std::size_t size() const { return keys_.size(); }
  const std::vector<std::shared_ptr<const Key>>& keys() const { return keys_; }

 private:
  std::vector<std::shared_ptr<const Key>> keys_;
};

// A JWK (as JSON text) made into a Key; null with `error` set when it is not one of
// ours (RSA with n/e, EC P-256 with x/y, OKP Ed25519 with x).
std::shared_ptr<const Key> keyFromJwk(const boost::json::value& jwk, std::string& error);

// A token split and decoded, not yet trusted.
struct Token {
  std::string_view signing_input;  // "header.payload", what the signature covers
  std::string signature;
  Alg alg = Alg::RS256;
  std::string kid;
  boost::json::value claims;  // an object
  std::string_view issuer;    // claims.iss (empty when absent or not text)
};

// Splits and decodes `compact` (which `out` then points into: keep it alive). Refuses
// a wrong shape, bad base64url, non-JSON, an oversized token or header, and any alg
// but the three (UnsupportedAlg comes last: `out.issuer` is set then, never trusted).
std::optional<Failure> parse(std::string_view compact, Token& out);

// Whether the text could be a JWT at all (three segments, the first a JSON object's
// base64url): anything else is some other credential, for the next link.
bool looksLikeJwt(std::string_view text);

struct Policy {
  std::string_view issuer;                  // iss must equal it
  std::span<const std::string> audiences;   // aud (a string or a list) must hold one of them
  std::int64_t clock_skew_s = 60;           // tolerance for exp and nbf
  std::int64_t now_s = 0;                   // unix seconds
};

// Checks a parsed token: its key in `keys`, the signature, then iss, aud, exp and nbf.
// `used` gets the key that verified it.
std::optional<Failure> verify(const Token& token, const KeySet& keys, const Policy& policy, const Key** used = nullptr);

// The token's exp (unix seconds), or 0.
std::int64_t expiry(const Token& token);

}  // namespace tahua::jwt
