#include "identity/jwt_verifier.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>

#include "core/base64.h"
#include "core/json_read.h"

namespace tahua::jwt {
namespace bj = boost::json;

std::string_view algName(Alg a) {
  switch (a) {
    case Alg::RS256: return "RS256";
    case Alg::ES256: return "ES256";
    case Alg::EdDSA: return "EdDSA";
  }
  return "?";
}

std::string_view failureCode(Failure f) {
  switch (f) {
    case Failure::Malformed: return "malformed";
    case Failure::TooLarge: return "too_large";
    case Failure::UnsupportedAlg: return "unsupported_alg";
    case Failure::UnknownKey: return "unknown_key";
    case Failure::BadSignature: return "bad_signature";
    case Failure::Expired: return "expired";
    case Failure::NotYetValid: return "not_yet_valid";
    case Failure::WrongIssuer: return "wrong_issuer";
    case Failure::WrongAudience: return "wrong_audience";
    case Failure::MissingClaim: return "missing_claim";
  }
  return "invalid";
}

std::string_view failureMessage(Failure f) {
  switch (f) {
    case Failure::Malformed: return "Invalid token (malformed): it is not a well-formed JWT.";
    case Failure::TooLarge: return "Invalid token (too_large): it is larger than this gateway accepts.";
    case Failure::UnsupportedAlg:
      return "Invalid token (unsupported_alg): only RS256, ES256 and EdDSA signatures are accepted.";
    case Failure::UnknownKey: return "Invalid token (unknown_key): it is signed by a key the issuer does not list.";
    case Failure::BadSignature: return "Invalid token (bad_signature): its signature does not verify.";
    case Failure::Expired: return "Invalid token (expired): it has expired.";
    case Failure::NotYetValid: return "Invalid token (not_yet_valid): it is not valid yet (nbf).";
    case Failure::WrongIssuer: return "Invalid token (wrong_issuer): its issuer is not the one configured.";
    case Failure::WrongAudience: return "Invalid token (wrong_audience): it is not meant for this gateway (aud).";
    case Failure::MissingClaim: return "Invalid token (missing_claim): it lacks exp or the subject claim.";
  }
  return "Invalid token.";
}

namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

const bj::string* textField(const bj::object& o, std::string_view name) {
  const bj::value* v = o.if_contains(name);
  return v ? v->if_string() : nullptr;
}

// A base64url member of a JWK, decoded; empty when absent or malformed.
std::string b64Field(const bj::object& o, std::string_view name) {
  const bj::string* s = textField(o, name);
  if (!s || s->size() > 2048) return {};
  auto d = base64UrlDecode(*s);
  return d ? std::move(*d) : std::string();
}

// An EVP_PKEY of `type` from OSSL parameters (EVP_PKEY_fromdata), public part only.
PkeyPtr fromData(const char* type, OSSL_PARAM* params) {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr);
  EVP_PKEY* pkey = nullptr;
  if (ctx && EVP_PKEY_fromdata_init(ctx) == 1) EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params);
  EVP_PKEY_CTX_free(ctx);
  return PkeyPtr(pkey);
}

PkeyPtr rsaKey(const std::string& n, const std::string& e, std::string& error) {
  // Under 2048 bits is breakable; over 8192 only makes every first sight slow.
  std::size_t lead = 0;
  while (lead < n.size() && n[lead] == 0) ++lead;
  const std::size_t bits = (n.size() - lead) * 8;
  if (bits < 2048 || bits > 8192) {
    error = "RSA modulus must be 2048 to 8192 bits";
    return nullptr;
  }
  if (e.empty() || e.size() > 8) {
    error = "RSA exponent missing or too large";
    return nullptr;
  }
  BIGNUM* bn_n = BN_bin2bn(reinterpret_cast<const unsigned char*>(n.data()), static_cast<int>(n.size()), nullptr);
  BIGNUM* bn_e = BN_bin2bn(reinterpret_cast<const unsigned char*>(e.data()), static_cast<int>(e.size()), nullptr);
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  OSSL_PARAM* params = nullptr;
  if (bn_n && bn_e && bld && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn_n) == 1 &&
      OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, bn_e) == 1)
    params = OSSL_PARAM_BLD_to_param(bld);
  PkeyPtr key = params ? fromData("RSA", params) : nullptr;
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  BN_free(bn_n);
  BN_free(bn_e);
  if (!key) error = "RSA key not accepted by OpenSSL";
  return key;
}

// A public key given as octets (EC: 0x04 || x || y with the group; Ed25519: x).
PkeyPtr octetKey(const char* type, const char* group, std::string pub, std::string& error) {
  OSSL_PARAM params[3];
  std::size_t i = 0;
  if (group) params[i++] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, const_cast<char*>(group), 0);
  params[i++] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, pub.data(), pub.size());
  params[i] = OSSL_PARAM_construct_end();
  PkeyPtr key = fromData(type, params);
  if (key && group) {
    // A point off the curve is an invalid-curve attack, not a key.
    EVP_PKEY_CTX* check = EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr);
    const bool ok = check && EVP_PKEY_public_check(check) == 1;
    EVP_PKEY_CTX_free(check);
    if (!ok) key.reset();
  }
  if (!key) error = std::string(type) + " key not accepted by OpenSSL";
  return key;
}

// The per-thread digest-verify context, reset between uses (no allocation per call).
EVP_MD_CTX* verifyContext() {
  struct Holder {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    ~Holder() { EVP_MD_CTX_free(ctx); }
  };
  thread_local Holder h;
  EVP_MD_CTX_reset(h.ctx);
  return h.ctx;
}

// A JWS ES256 signature is R || S, 32 bytes each; OpenSSL wants DER.
std::string es256Der(std::string_view raw) {
  if (raw.size() != 64) return {};
  ECDSA_SIG* sig = ECDSA_SIG_new();
  BIGNUM* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()), 32, nullptr);
  BIGNUM* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()) + 32, 32, nullptr);
  std::string der;
  if (sig && r && s && ECDSA_SIG_set0(sig, r, s) == 1) {
    r = s = nullptr;  // owned by sig now
    unsigned char* out = nullptr;
    const int n = i2d_ECDSA_SIG(sig, &out);
    if (n > 0) der.assign(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
    OPENSSL_free(out);
  }
  BN_free(r);
  BN_free(s);
  ECDSA_SIG_free(sig);
  return der;
}

std::optional<Alg> algNamed(std::string_view s) {
  if (s == "RS256") return Alg::RS256;
  if (s == "ES256") return Alg::ES256;
  if (s == "EdDSA") return Alg::EdDSA;
  return std::nullopt;
}

std::optional<std::int64_t> numericDate(const bj::object& o, std::string_view name, bool& bad) {
  const bj::value* v = o.if_contains(name);
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return v->as_uint64() > 1ull << 62 ? std::int64_t{1} << 62 : static_cast<std::int64_t>(v->as_uint64());
  if (v->is_double() && std::isfinite(v->as_double()) && std::fabs(v->as_double()) < 1e15)
    return static_cast<std::int64_t>(std::floor(v->as_double()));
  bad = true;
  return std::nullopt;
}

}  // namespace

Key::Key(std::string kid, Alg alg, std::string material, void* pkey)
    : kid_(std::move(kid)), alg_(alg), material_(std::move(material)), pkey_(pkey) {}

Key::~Key() { EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_)); }

bool Key::verifies(std::string_view input, std::string_view signature) const {
  std::string der;
  if (alg_ == Alg::ES256) {
    der = es256Der(signature);
    if (der.empty()) return false;
    signature = der;
  } else if (alg_ == Alg::EdDSA && signature.size() != 64) {
    return false;
  }
  EVP_MD_CTX* ctx = verifyContext();
  // Ed25519 hashes internally: no digest name.
  const char* md = alg_ == Alg::EdDSA ? nullptr : "SHA256";
  if (EVP_DigestVerifyInit_ex(ctx, nullptr, md, nullptr, nullptr, static_cast<EVP_PKEY*>(pkey_), nullptr) != 1) return false;
  return EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                          reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
}

std::shared_ptr<const Key> keyFromJwk(const bj::value& jwk, std::string& error) {
  const bj::object* o = jwk.if_object();
  if (!o) {
    error = "not an object";
    return nullptr;
  }
  const bj::string* kty = textField(*o, "kty");
  if (!kty) {
    error = "no kty";
    return nullptr;
  }
  if (const bj::string* use = textField(*o, "use"); use && *use != "sig") {
    error = "not a signing key";
    return nullptr;
  }
  std::string kid;
  if (const bj::string* k = textField(*o, "kid")) kid.assign(k->data(), std::min<std::size_t>(k->size(), 256));
  const bj::string* alg_text = textField(*o, "alg");
  std::optional<Alg> alg = alg_text ? algNamed(*alg_text) : std::nullopt;
  if (alg_text && !alg) {
    error = "algorithm " + std::string(alg_text->data(), std::min<std::size_t>(alg_text->size(), 16)) + " not accepted";
    return nullptr;
  }
  PkeyPtr pkey;
  std::string material;
  if (*kty == "RSA") {
    if (alg && *alg != Alg::RS256) {
      error = "RSA key with a non-RSA alg";
      return nullptr;
    }
    std::string n = b64Field(*o, "n"), e = b64Field(*o, "e");
    if (n.empty() || e.empty()) {
      error = "RSA key without n and e";
      return nullptr;
    }
    pkey = rsaKey(n, e, error);
    alg = Alg::RS256;
    material = "RSA:" + n + ":" + e;
  } else if (*kty == "EC") {
    const bj::string* crv = textField(*o, "crv");
    if (!crv || *crv != "P-256" || (alg && *alg != Alg::ES256)) {
      error = "EC key other than P-256 / ES256";
      return nullptr;
    }
    std::string x = b64Field(*o, "x"), y = b64Field(*o, "y");
    if (x.size() != 32 || y.size() != 32) {
      error = "P-256 key without 32-byte x and y";
      return nullptr;
    }
    pkey = octetKey("EC", "prime256v1", "\x04" + x + y, error);
    alg = Alg::ES256;
    material = "EC:" + x + y;
  } else if (*kty == "OKP") {
    const bj::string* crv = textField(*o, "crv");
    if (!crv || *crv != "Ed25519" || (alg && *alg != Alg::EdDSA)) {
      error = "OKP key other than Ed25519";
      return nullptr;
    }
    std::string x = b64Field(*o, "x");
    if (x.size() != 32) {
      error = "Ed25519 key without a 32-byte x";
      return nullptr;
    }
    pkey = octetKey("ED25519", nullptr, x, error);
    alg = Alg::EdDSA;
    material = "OKP:" + x;
  } else {
    // "oct" (HMAC secrets) above all: never a verification key here.
    error = "key type " + std::string(kty->data(), std::min<std::size_t>(kty->size(), 16)) + " not accepted";
    return nullptr;
  }
  if (!pkey) return nullptr;
  return std::make_shared<const Key>(std::move(kid), *alg, std::move(material), pkey.release());
}

std::shared_ptr<const KeySet> KeySet::parse(std::string_view json, const KeySet* previous, std::string& error) {
  if (json.size() > kMaxJwksBytes) {
    error = "the JWKS is larger than 256 KiB";
    return nullptr;
  }
  boost::system::error_code ec;
  const bj::value doc = readJson(json, ec);
  const bj::object* o = ec ? nullptr : doc.if_object();
  const bj::value* keys = o ? o->if_contains("keys") : nullptr;
  if (!keys || !keys->is_array()) {
    error = "not a JWKS (an object with a \"keys\" list)";
    return nullptr;
  }
  auto set = std::make_shared<KeySet>();
  for (const bj::value& jwk : keys->as_array()) {
    if (set->keys_.size() == kMaxKeys) break;
    std::string why;
    std::shared_ptr<const Key> k = keyFromJwk(jwk, why);
    if (!k) continue;  // another kind of key (encryption, HMAC, another curve): not ours
    if (previous)
      for (const auto& old : previous->keys_)
        if (old->kid() == k->kid() && old->alg() == k->alg() && old->material() == k->material()) k = old;
    set->keys_.push_back(std::move(k));
  }
  return set;
}

std::shared_ptr<const KeySet> KeySet::of(std::vector<std::shared_ptr<const Key>> keys) {
  auto set = std::make_shared<KeySet>();
  set->keys_ = std::move(keys);
  return set;
}

const Key* KeySet::find(std::string_view kid, Alg alg) const {
  const Key* only = nullptr;
  std::size_t of_alg = 0;
  for (const auto& k : keys_) {
    if (k->alg() != alg) continue;
    if (!kid.empty() && k->kid() == kid) return k.get();
    ++of_alg;
    only = k.get();
  }
  return kid.empty() && of_alg == 1 ? only : nullptr;
}

bool KeySet::contains(const Key* key) const {
  return std::any_of(keys_.begin(), keys_.end(), [key](const auto& k) { return k.get() == key; });
}

bool looksLikeJwt(std::string_view text) {
  // The header is a JSON object: its base64url starts with "ey" ('{' then a quote or space).
  return text.size() > 4 && text.substr(0, 2) == "ey" && std::count(text.begin(), text.end(), '.') == 2;
}

std::optional<Failure> parse(std::string_view compact, Token& out) {
  if (compact.size() > kMaxTokenBytes) return Failure::TooLarge;
  const std::size_t d1 = compact.find('.');
  const std::size_t d2 = d1 == std::string_view::npos ? d1 : compact.find('.', d1 + 1);
  if (d2 == std::string_view::npos || compact.find('.', d2 + 1) != std::string_view::npos) return Failure::Malformed;
  const std::string_view h64 = compact.substr(0, d1), p64 = compact.substr(d1 + 1, d2 - d1 - 1), s64 = compact.substr(d2 + 1);
  if (h64.empty() || p64.empty()) return Failure::Malformed;
  if (h64.size() > kMaxHeaderBytes * 4 / 3 + 4) return Failure::TooLarge;
  auto header_text = base64UrlDecode(h64);
  auto payload_text = base64UrlDecode(p64);
  auto signature = base64UrlDecode(s64);
  if (!header_text || !payload_text || !signature) return Failure::Malformed;
  boost::system::error_code ec;
  const bj::value header = readJson(*header_text, ec);
  if (ec || !header.is_object()) return Failure::Malformed;
  const bj::object& h = header.as_object();
  const bj::string* alg = textField(h, "alg");
  if (!alg) return Failure::Malformed;
  const auto a = algNamed(*alg);
  // none, HS256, PS256, ...: refused before any key is looked at (the claims are still
  // read, so the caller can tell whose token it is). A critical header extension we do
  // not know must be refused too (RFC 7515 4.1.11).
  const bool unsupported = !a || h.contains("crit");
  out.alg = a.value_or(Alg::RS256);
  out.kid.clear();
  if (const bj::value* kid = h.if_contains("kid")) {
    if (!kid->is_string() || kid->as_string().size() > 256) return Failure::Malformed;
    out.kid.assign(kid->as_string().data(), kid->as_string().size());
  }
  out.claims = readJson(*payload_text, ec);
  if (ec || !out.claims.is_object()) return Failure::Malformed;
  out.issuer = {};
  if (const bj::string* iss = textField(out.claims.as_object(), "iss")) out.issuer = std::string_view(iss->data(), iss->size());
  out.signing_input = compact.substr(0, d2);
  out.signature = std::move(*signature);
  if (unsupported) return Failure::UnsupportedAlg;
  return std::nullopt;
}

std::optional<Failure> verify(const Token& token, const KeySet& keys, const Policy& policy, const Key** used) {
  const Key* key = keys.find(token.kid, token.alg);
  if (!key) return Failure::UnknownKey;
  if (!key->verifies(token.signing_input, token.signature)) return Failure::BadSignature;
  const bj::object& c = token.claims.as_object();
  if (token.issuer != policy.issuer) return Failure::WrongIssuer;
  const bj::value* aud = c.if_contains("aud");
  bool aud_ok = false;
  auto accepted = [&](const bj::value& v) {
    const bj::string* s = v.if_string();
    return s && std::any_of(policy.audiences.begin(), policy.audiences.end(), [&](const std::string& a) { return *s == a; });
  };
  if (aud && aud->is_array())
    aud_ok = std::any_of(aud->as_array().begin(), aud->as_array().end(), accepted);
  else if (aud)
    aud_ok = accepted(*aud);
  if (!aud_ok) return Failure::WrongAudience;
  bool bad = false;
  const auto exp = numericDate(c, "exp", bad);
  const auto nbf = numericDate(c, "nbf", bad);
  if (bad) return Failure::Malformed;
  if (!exp) return Failure::MissingClaim;  // a token that never expires is not accepted
  if (policy.now_s >= *exp + policy.clock_skew_s) return Failure::Expired;
  if (nbf && policy.now_s + policy.clock_skew_s < *nbf) return Failure::NotYetValid;
  if (used) *used = key;
  return std::nullopt;
}

std::int64_t expiry(const Token& token) {
  bool bad = false;
  return numericDate(token.claims.as_object(), "exp", bad).value_or(0);
}

}  // namespace tahua::jwt
