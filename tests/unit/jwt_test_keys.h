// Key pairs of each JWT algorithm made by OpenSSL, their public JWKs and tokens they
// sign: for the verifier's unit tests and the jwt link's benchmark.
#pragma once

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <boost/json.hpp>
#include <string>

#include "core/base64.h"
#include "identity/jwt_verifier.h"

namespace tahua::jwt {
namespace bj = boost::json;

inline std::string b64(std::string_view s) { return base64UrlEncode(s); }

inline std::string bnBytes(EVP_PKEY* k, const char* name, int pad = 0) {
  BIGNUM* bn = nullptr;
  if (EVP_PKEY_get_bn_param(k, name, &bn) != 1) return {};
  std::string out(static_cast<std::size_t>(std::max(BN_num_bytes(bn), pad)), '\0');
  BN_bn2binpad(bn, reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size()));
  BN_free(bn);
  return out;
}

// A key pair of one algorithm and its public JWK.
struct Signer {
  Alg alg;
  std::string kid;
  EVP_PKEY* pkey = nullptr;
  Signer(Alg a, std::string k) : alg(a), kid(std::move(k)) {
    pkey = a == Alg::RS256 ? EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", static_cast<size_t>(2048))
           : a == Alg::ES256 ? EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256")
                             : EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  }
  ~Signer() { EVP_PKEY_free(pkey); }
  Signer(const Signer&) = delete;

  bj::object jwk() const {
    bj::object o{{"kid", kid}, {"use", "sig"}};
    if (alg == Alg::RS256) {
      o["kty"] = "RSA";
      o["n"] = b64(bnBytes(pkey, OSSL_PKEY_PARAM_RSA_N));
      o["e"] = b64(bnBytes(pkey, OSSL_PKEY_PARAM_RSA_E));
    } else if (alg == Alg::ES256) {
      o["kty"] = "EC";
      o["crv"] = "P-256";
      o["x"] = b64(bnBytes(pkey, OSSL_PKEY_PARAM_EC_PUB_X, 32));
      o["y"] = b64(bnBytes(pkey, OSSL_PKEY_PARAM_EC_PUB_Y, 32));
    } else {
      o["kty"] = "OKP";
      o["crv"] = "Ed25519";
      unsigned char raw[32];
      size_t n = sizeof raw;
      EVP_PKEY_get_raw_public_key(pkey, raw, &n);
      o["x"] = b64(std::string_view(reinterpret_cast<char*>(raw), n));
    }
    return o;
  }

  std::string sign(std::string_view input) const {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EVP_DigestSignInit_ex(ctx, nullptr, alg == Alg::EdDSA ? nullptr : "SHA256", nullptr, nullptr, pkey, nullptr);
    size_t n = 0;
    EVP_DigestSign(ctx, nullptr, &n, reinterpret_cast<const unsigned char*>(input.data()), input.size());
    std::string sig(n, '\0');
    EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &n, reinterpret_cast<const unsigned char*>(input.data()),
                   input.size());
    sig.resize(n);
    EVP_MD_CTX_free(ctx);
    if (alg != Alg::ES256) return sig;
    // DER to JWS's R || S.
    const unsigned char* p = reinterpret_cast<const unsigned char*>(sig.data());
    ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(sig.size()));
    std::string raw(64, '\0');
    BN_bn2binpad(ECDSA_SIG_get0_r(es), reinterpret_cast<unsigned char*>(raw.data()), 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(es), reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
    ECDSA_SIG_free(es);
    return raw;
  }

  std::string publicPem() const {
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PUBKEY(bio, pkey);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    std::string pem(data, static_cast<std::size_t>(n));
    BIO_free(bio);
    return pem;
  }

  std::string token(const bj::object& claims, std::string_view alg_override = {}) const {
    bj::object header{{"alg", alg_override.empty() ? algName(alg) : alg_override}, {"typ", "JWT"}, {"kid", kid}};
    const std::string input = b64(bj::serialize(header)) + "." + b64(bj::serialize(claims));
    return input + "." + b64(sign(input));
  }
};

}  // namespace tahua::jwt
