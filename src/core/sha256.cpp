#include "core/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace tahua {
namespace {

struct DigestContext {
  DigestContext() : md(EVP_MD_fetch(nullptr, "SHA256", nullptr)), ctx(EVP_MD_CTX_new()) {
    if (!md || !ctx) std::abort();  // OpenSSL without SHA-256 cannot run this program
  }
  ~DigestContext() {
    EVP_MD_CTX_free(ctx);
    EVP_MD_free(md);
  }
  EVP_MD* md;
  EVP_MD_CTX* ctx;
};

}  // namespace

Sha256 sha256(std::string_view data) {
  thread_local DigestContext dc;
  Sha256 out{};
  unsigned int len = 0;
  if (EVP_DigestInit_ex2(dc.ctx, dc.md, nullptr) != 1 || EVP_DigestUpdate(dc.ctx, data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(dc.ctx, out.data(), &len) != 1 || len != out.size())
    std::abort();  // cannot fail for SHA-256 with valid arguments
  return out;
}

std::string sha1Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha1(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string toHex(const Sha256& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(64, '0');
  for (std::size_t i = 0; i < digest.size(); ++i) {
    s[2 * i] = kHex[digest[i] >> 4];
    s[2 * i + 1] = kHex[digest[i] & 15];
  }
  return s;
}

}  // namespace tahua
