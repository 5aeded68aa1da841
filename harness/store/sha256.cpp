#include "harness/store/sha256.hpp"

#include <openssl/evp.h>

#include <memory>
#include <stdexcept>

namespace kcert::store {

// OpenSSL's EVP digest (issue 51): libpq already links libcrypto, and a hand-written SHA-256
// was 70 lines to keep correct. The FIPS 180-4 vectors in tests/store pin the result.
std::string sha256_hex(std::string_view bytes) {
  const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1 || EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1) {
    throw std::runtime_error("sha256: OpenSSL's digest failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0x0F];
  }
  return out;
}

}  // namespace kcert::store
