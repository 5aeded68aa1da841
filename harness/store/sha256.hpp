#pragma once
// SHA-256 (FIPS 180-4), for content hashes of test-case files and environment fingerprints.
// OpenSSL computes it (libcrypto, which libpq already brings).
#include <string>
#include <string_view>

namespace kcert::store {

// Lower-case hex digest of the bytes.
std::string sha256_hex(std::string_view bytes);

}  // namespace kcert::store
